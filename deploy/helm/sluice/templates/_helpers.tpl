{{/* The chart's name, or nameOverride. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release's, with the chart's added unless it already holds it. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* What selects the pods: never changes across upgrades. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sluice.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $repo = printf "%s/%s" .Values.image.registry $repo -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the rules, when they come from files. */}}
{{- define "sluice.rulesConfigMap" -}}
{{- if eq .Values.rules.source "configMap" -}}
{{- .Values.rules.existingConfigMap -}}
{{- else -}}
{{- printf "%s-rules" (include "sluice.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Pods the release may run at most: what decides whether to spread. */}}
{{- define "sluice.maxReplicas" -}}
{{- if .Values.autoscaling.enabled -}}{{ .Values.autoscaling.maxReplicas }}{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{/* Refusals of what the schema cannot see: combinations of values. */}}
{{- define "sluice.validate" -}}
{{- if and (eq .Values.store.type "memory") (gt (int (include "sluice.maxReplicas" .)) 1) -}}
{{- fail "store.type memory counts in each pod alone: set replicaCount 1 (and autoscaling.enabled false), or a shared store (redis, sentinel, cluster)" -}}
{{- end -}}
{{- if and (eq .Values.store.type "memcache") (not .Values.store.memcacheServers) -}}
{{- fail "store.type memcache needs store.memcacheServers (host:port,...)" -}}
{{- end -}}
{{- if and (eq .Values.store.type "memcache") (eq .Values.rules.source "inline") (not .Values.rules.files) -}}
{{- fail "store.type memcache: the example rules hold a concurrency limit, which memcached cannot; give your rules in rules.files" -}}
{{- end -}}
{{- if and (has .Values.store.type (list "redis" "sentinel" "cluster")) (not .Values.store.existingSecret) -}}
{{- fail (printf "store.type %s needs store.existingSecret: a Secret holding the store's address (key store.secretKey)" .Values.store.type) -}}
{{- end -}}
{{- if and (eq .Values.rules.source "configMap") (not .Values.rules.existingConfigMap) -}}
{{- fail "rules.source configMap needs rules.existingConfigMap" -}}
{{- end -}}
{{- if and (eq .Values.rules.source "xds") (not .Values.rules.xds.server) -}}
{{- fail "rules.source xds needs rules.xds.server (host:port of the management server)" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) -}}
{{- fail "tls.enabled needs tls.existingSecret (a kubernetes.io/tls Secret)" -}}
{{- end -}}
{{- if and .Values.store.tls.enabled (not .Values.store.tls.existingSecret) -}}
{{- fail "store.tls.enabled needs store.tls.existingSecret (ca.crt, and tls.crt and tls.key for mutual TLS)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) -}}
{{- fail "autoscaling.maxReplicas is below autoscaling.minReplicas" -}}
{{- end -}}
{{- end -}}
