{{/* The container's environment: sluice's flags as SLUICE_* variables, secrets by reference. */}}
{{- define "sluice.env" -}}
{{- $v := .Values -}}
{{- if eq $v.rules.source "xds" }}
- {name: SLUICE_CONFIG_XDS, value: {{ $v.rules.xds.server | quote }}}
{{- with $v.rules.xds.nodeId }}
- {name: SLUICE_XDS_NODE_ID, value: {{ . | quote }}}
{{- end }}
{{- else }}
- {name: SLUICE_CONFIG, value: /etc/sluice/rules}
{{- end }}
- {name: SLUICE_GRPC_ADDR, value: "0.0.0.0:{{ $v.service.grpcPort }}"}
- {name: SLUICE_ADMIN_ADDR, value: "0.0.0.0:{{ $v.service.adminPort }}"}
- {name: SLUICE_LOG_FORMAT, value: {{ $v.logFormat | quote }}}
- {name: SLUICE_LOG_LEVEL, value: {{ $v.logLevel | quote }}}
- {name: SLUICE_SHUTDOWN_DELAY, value: "{{ $v.shutdown.delaySeconds }}s"}
- {name: SLUICE_SHUTDOWN_GRACE, value: "{{ $v.shutdown.graceSeconds }}s"}
- {name: SLUICE_LEASED_ALLOWANCE, value: {{ $v.leasedAllowance | quote }}}
{{- if eq $v.store.type "memcache" }}
- {name: SLUICE_MEMCACHE_SERVERS, value: {{ $v.store.memcacheServers | quote }}}
{{- end }}
{{- if ne $v.store.type "memory" }}
{{- $var := dict "redis" "SLUICE_REDIS_URL" "cluster" "SLUICE_REDIS_CLUSTER" "sentinel" "SLUICE_REDIS_SENTINEL" }}
{{- if hasKey $var $v.store.type }}
- name: {{ get $var $v.store.type }}
  valueFrom:
    secretKeyRef: {name: {{ $v.store.existingSecret }}, key: {{ $v.store.secretKey }}}
{{- end }}
- {name: SLUICE_REDIS_TIMEOUT, value: {{ $v.store.timeout | quote }}}
- {name: SLUICE_STORE_FAILURE, value: {{ $v.store.failure | quote }}}
{{- if and (eq $v.store.type "sentinel") $v.store.sentinelPasswordSecret.name }}
- name: SLUICE_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $v.store.sentinelPasswordSecret.name }}, key: {{ $v.store.sentinelPasswordSecret.key }}}
{{- end }}
{{- if $v.store.tls.enabled }}
- {name: SLUICE_REDIS_TLS_CA, value: /etc/sluice/store-tls/ca.crt}
{{- if $v.store.tls.mutual }}
- {name: SLUICE_REDIS_TLS_CERT, value: /etc/sluice/store-tls/tls.crt}
- {name: SLUICE_REDIS_TLS_KEY, value: /etc/sluice/store-tls/tls.key}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.tls.enabled }}
- {name: SLUICE_GRPC_TLS_CERT, value: /etc/sluice/tls/tls.crt}
- {name: SLUICE_GRPC_TLS_KEY, value: /etc/sluice/tls/tls.key}
{{- with $v.tls.clientCAKey }}
- {name: SLUICE_GRPC_TLS_CLIENT_CA, value: /etc/sluice/tls/{{ . }}}
{{- end }}
{{- end }}
{{- if $v.adminToken.existingSecret }}
- {name: SLUICE_ADMIN_TOKEN_FILE, value: /etc/sluice/admin/{{ $v.adminToken.key }}}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Where the rules, certificates and token are mounted (read-only). */}}
{{- define "sluice.mounts" -}}
{{- $v := .Values -}}
{{- if ne $v.rules.source "xds" }}
- {name: rules, mountPath: /etc/sluice/rules, readOnly: true}
{{- end }}
{{- if $v.tls.enabled }}
- {name: tls, mountPath: /etc/sluice/tls, readOnly: true}
{{- end }}
{{- if and (ne $v.store.type "memory") $v.store.tls.enabled }}
- {name: store-tls, mountPath: /etc/sluice/store-tls, readOnly: true}
{{- end }}
{{- if $v.adminToken.existingSecret }}
- {name: admin-token, mountPath: /etc/sluice/admin, readOnly: true}
{{- end }}
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sluice.volumes" -}}
{{- $v := .Values -}}
{{- if ne $v.rules.source "xds" }}
- name: rules
  configMap: {name: {{ include "sluice.rulesConfigMap" . }}}
{{- end }}
{{- if $v.tls.enabled }}
- name: tls
  secret: {secretName: {{ $v.tls.existingSecret }}}
{{- end }}
{{- if and (ne $v.store.type "memory") $v.store.tls.enabled }}
- name: store-tls
  secret: {secretName: {{ $v.store.tls.existingSecret }}}
{{- end }}
{{- if $v.adminToken.existingSecret }}
- name: admin-token
  secret: {secretName: {{ $v.adminToken.existingSecret }}}
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Spread over zones, then nodes, when the release may run more than one pod; what the values give otherwise. */}}
{{- define "sluice.spread" -}}
{{- if .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml .Values.topologySpreadConstraints | nindent 2 }}
{{- else if gt (int (include "sluice.maxReplicas" .)) 1 }}
topologySpreadConstraints:
{{- range list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - maxSkew: 1
    topologyKey: {{ . }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "sluice.selectorLabels" $ | nindent 8 }}
    matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end }}
{{- end -}}
