//! An Envoy that reaches sluice over mutual TLS, as Envoy Gateway's does.

use super::*;

/// Envoy limiting every request by `generic_key k=v` in `domain`, asking the
/// rate-limit service on 127.0.0.1:`sluice_port` over TLS as Envoy
/// Gateway's `ratelimit_cluster` does: `client`.pem as Envoy's certificate,
/// trusting `ca.pem` (both in `dir`). Returns Envoy and its port.
pub fn mtls_envoy(
    dir: &Path,
    name: &str,
    domain: &str,
    sluice_port: u16,
    upstream: u16,
    client: &str,
) -> (Child, u16) {
    let port = free_port();
    let clusters = mtls_clusters(dir, client, sluice_port, upstream);
    let config = format!(
        r#"
static_resources:
  listeners:
  - address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          '@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              '@type': type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              timeout: 1s
              failure_mode_deny: false
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {{envoy_grpc: {{cluster_name: ratelimit_cluster}}}}
          - name: envoy.filters.http.router
            typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ['*']
              routes:
              - match: {{prefix: /}}
                route:
                  cluster: upstream
                  rate_limits: [{{actions: [{{generic_key: {{descriptor_key: k, descriptor_value: v}}}}]}}]
{clusters}"#
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, config).expect("write envoy config");
    let child = spawn_envoy(&path, &dir.join(format!("{name}.log")));
    (child, port)
}

/// The clusters of [`mtls_envoy`]'s config: sluice over mutual TLS as
/// `client`, and the upstream.
fn mtls_clusters(dir: &Path, client: &str, sluice_port: u16, upstream: u16) -> String {
    let d = dir.display();
    format!(
        r#"  clusters:
  - name: ratelimit_cluster
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        '@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        '@type': type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          alpn_protocols: [h2]
          tls_params: {{tls_maximum_protocol_version: TLSv1_3}}
          tls_certificates: [{{certificate_chain: {{filename: {d}/{client}.pem}}, private_key: {{filename: {d}/{client}.key}}}}]
          validation_context: {{trusted_ca: {{filename: {d}/ca.pem}}}}
    load_assignment:
      cluster_name: ratelimit_cluster
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {sluice_port}}}}}}}}}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
"#
    )
}
