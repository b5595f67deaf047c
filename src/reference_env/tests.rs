use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The value after `--name`, if given.
fn value<'a>(t: &'a Translation, name: &str) -> Option<&'a str> {
    let flag = format!("--{name}");
    let at = t.args.iter().position(|a| *a == flag)?;
    t.args.get(at + 1).map(String::as_str)
}

/// Envoy Gateway's ratelimit Deployment, as it renders it by default
/// (internal/infrastructure/kubernetes/ratelimit), with statsd on.
pub(crate) const ENVOY_GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "true"),
    ("STATSD_HOST", "localhost"),
    ("STATSD_PORT", "9125"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "redis.redis.svc:6379"),
    ("USE_PROMETHEUS", "true"),
    ("PROMETHEUS_ADDR", ":19001"),
    ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
];

#[test]
fn envoy_gateway_deployment_becomes_sluice_flags() {
    let t = translate(env(ENVOY_GATEWAY)).expect("translates");
    assert_eq!(t.args.first().map(String::as_str), Some("serve"));
    assert_eq!(value(&t, "grpc-addr"), Some("0.0.0.0:8081"));
    assert_eq!(value(&t, "admin-addr"), Some("0.0.0.0:8080,0.0.0.0:6070"));
    // The reference's stats, named by its mapping file, on PROMETHEUS_ADDR.
    assert_eq!(value(&t, "reference-metrics-addr"), Some("0.0.0.0:19001"));
    assert_eq!(
        value(&t, "reference-metrics-mapper"),
        Some("/etc/statsd-exporter/conf.yaml")
    );
    assert_eq!(value(&t, "config-xds"), Some("envoy-gateway:18001"));
    assert_eq!(value(&t, "xds-node-id"), Some("envoy-ratelimit"));
    assert_eq!(value(&t, "xds-tls-ca"), Some("/certs/ca.crt"));
    assert_eq!(value(&t, "xds-tls-cert"), Some("/certs/tls.crt"));
    assert_eq!(value(&t, "xds-tls-key"), Some("/certs/tls.key"));
    assert_eq!(value(&t, "grpc-tls-cert"), Some("/certs/tls.crt"));
    assert_eq!(value(&t, "grpc-tls-client-ca"), Some("/certs/ca.crt"));
    assert_eq!(value(&t, "redis-url"), Some("redis://redis.redis.svc:6379"));
    assert_eq!(value(&t, "key-format"), Some("envoyproxy"));
    assert_eq!(value(&t, "statsd-addr"), Some("localhost:9125"));
    assert_eq!(value(&t, "log-level"), Some("info"));
    assert_eq!(value(&t, "local-cache-size"), Some("0"));
    assert_eq!(value(&t, "config"), None, "xDS, not files");
    for var in ["RUNTIME_WATCH_ROOT", "FORCE_START_WITHOUT_INITIAL_CONFIG"] {
        assert!(
            t.notes.iter().any(|n| n.starts_with(var)),
            "{var} is said at startup: {:?}",
            t.notes
        );
    }
}

#[test]
fn calendar_months_are_a_switch() {
    let on = translate(env(&[("USE_CALENDAR_MONTH_RATE_LIMIT", "true")])).expect("translates");
    assert!(
        on.args.iter().any(|a| a == "--calendar-months"),
        "{:?}",
        on.args
    );
    let off = translate(env(&[("USE_CALENDAR_MONTH_RATE_LIMIT", "false")])).expect("translates");
    assert!(!off.args.iter().any(|a| a == "--calendar-months"));
    assert!(translate(env(&[("USE_CALENDAR_MONTH_RATE_LIMIT", "maybe")])).is_err());
}

#[test]
fn an_empty_environment_has_the_reference_defaults() {
    let t = translate(Vec::new()).expect("translates");
    assert_eq!(
        value(&t, "config"),
        Some("/srv/runtime_data/current/config")
    );
    assert_eq!(
        value(&t, "redis-url"),
        Some("redis+unix:///var/run/nutcracker/ratelimit.sock")
    );
    assert_eq!(value(&t, "statsd-addr"), Some("localhost:8125"));
    assert_eq!(value(&t, "log-level"), Some("warn"));
    assert_eq!(value(&t, "near-limit-ratio"), Some("0.8"));
    assert_eq!(value(&t, "admin-addr"), Some("0.0.0.0:8080,0.0.0.0:6070"));
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}

#[test]
fn files_sentinel_auth_and_switches() {
    let t = translate(env(&[
        ("RUNTIME_ROOT", "/srv/rt"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_APPDIRECTORY", "rules"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
        ("REDIS_SENTINEL_AUTH", "s3cret"),
        ("SHADOW_MODE", "true"),
        ("USE_STATSD", "false"),
        ("GRPC_UDS", "/run/rl.sock"),
    ]))
    .expect("translates");
    assert_eq!(value(&t, "config"), Some("/srv/rt/ratelimit/rules"));
    assert_eq!(
        value(&t, "redis-sentinel"),
        Some("mymaster@10.0.0.1:26379,10.0.0.2:26379")
    );
    assert_eq!(value(&t, "redis-sentinel-password"), Some("s3cret"));
    assert_eq!(value(&t, "grpc-uds"), Some("/run/rl.sock"));
    assert_eq!(value(&t, "statsd-addr"), None);
    assert!(t.args.iter().any(|a| a == "--shadow-mode"));

    let t = translate(env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:6379"),
        ("REDIS_AUTH", "app:p@ss/w"),
        ("REDIS_TLS", "true"),
    ]))
    .expect("translates");
    assert_eq!(
        value(&t, "redis-url"),
        Some("rediss://app:p%40ss%2Fw@r:6379")
    );
}

#[test]
fn what_sluice_cannot_do_is_an_error_naming_the_variable() {
    for (pairs, var) in [
        (vec![("REDIS_PERSECOND", "true")], "REDIS_PERSECOND"),
        (vec![("CONFIG_TYPE", "XDS_DELTA")], "CONFIG_TYPE"),
        (vec![("BACKEND_TYPE", "dynamo")], "BACKEND_TYPE"),
        (
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
            "LIMIT_RESPONSE_HEADERS_ENABLED",
        ),
        (
            vec![("GRPC_SERVER_USE_TLS", "true")],
            "GRPC_SERVER_TLS_CERT",
        ),
        (vec![("USE_STATSD", "maybe")], "USE_STATSD"),
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "thrift"),
            ],
            "TRACING_EXPORTER_PROTOCOL",
        ),
        (
            vec![
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ],
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        ),
    ] {
        let err = translate(env(&pairs)).expect_err(var);
        assert!(err.to_string().starts_with(var), "{err}");
    }
    // The reference's own default is accepted.
    assert!(translate(env(&[("REDIS_PERSECOND", "false")])).is_ok());
}

/// Envoy Gateway's tracing Deployment: `TRACING_ENABLED` and an endpoint on
/// port 4318, no protocol, so the reference exports OTLP over HTTP; so
/// does sluice (it used to refuse to start). `grpc` is gRPC.
#[test]
fn tracing_exports_over_the_protocol_the_reference_would() {
    let on = [
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
    ];
    let t = translate(env(&on)).expect("http is the reference's default");
    assert_eq!(value(&t, "otlp-protocol"), Some("http/protobuf"));
    let mut grpc = on.to_vec();
    grpc.push(("TRACING_EXPORTER_PROTOCOL", "grpc"));
    let t = translate(env(&grpc)).expect("grpc");
    assert_eq!(value(&t, "otlp-protocol"), Some("grpc"));
}
