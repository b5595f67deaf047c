//! Every rate-limit Deployment Envoy Gateway's own tests hold
//! (tests/compat/envoy-gateway/deployments, at a named commit: tracing,
//! custom tracing, Redis TLS, a Redis URL from a secret, extension and
//! override environments, HPA, ...), its container's environment as
//! `/bin/ratelimit` gets it: each translates into flags `serve` takes, and
//! each, started as `ratelimit` with only that environment (its hosts and
//! files pointed at local stand-ins), stays up, answers `/healthcheck`,
//! takes its rules over xDS and decides over mutual TLS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::common::ads::{Ads, config, serve_tls};
use super::common::redis::{RedisServer, free_port};
use super::common::{eventually, workspace};
use super::{get, secret, start_binary, xds_server_tls};

/// Each Deployment's file and the environment of its `envoy-ratelimit`
/// container (a value from a secret or a field as a stand-in).
fn deployments() -> Vec<(PathBuf, Vec<(String, String)>)> {
    let dir = workspace().join("tests/compat/envoy-gateway/deployments");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("deployments") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("deployment");
        let doc: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
        let containers = doc
            .pointer("/spec/template/spec/containers")
            .and_then(serde_json::Value::as_array)
            .expect("containers");
        let ratelimit = containers
            .iter()
            .find(|c| c["name"] == "envoy-ratelimit")
            .expect("the rate-limit container");
        assert_eq!(
            ratelimit["command"][0],
            "/bin/ratelimit",
            "{}",
            path.display()
        );
        let env = ratelimit["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                let name = e["name"].as_str().expect("name").to_owned();
                let value = match (e["value"].as_str(), name.as_str()) {
                    (Some(v), _) => v.to_owned(),
                    (None, "REDIS_URL") => "redis.redis.svc:6379".to_owned(),
                    (None, _) => "stand-in".to_owned(),
                };
                (name, value)
            })
            .collect();
        out.push((path, env));
    }
    out.sort();
    out
}

fn is_sentinel(env: &[(String, String)]) -> bool {
    env.iter()
        .any(|(k, v)| k == "REDIS_TYPE" && v == "sentinel")
}

#[test]
fn every_envoy_gateway_deployment_environment_is_taken() {
    use clap::Parser as _;
    let mut taken = 0;
    for (path, env) in deployments() {
        // patch-deployment-containers patches REDIS_TYPE to sentinel and
        // keeps a plain host:port: the reference takes that as the master's
        // name with no sentinel to ask, and never connects. sluice says so
        // at start, naming the variable.
        if is_sentinel(&env) {
            let err = sluice::reference_env::translate(env).expect_err("no sentinel to ask");
            assert!(err.to_string().starts_with("REDIS_URL"), "{err}");
            taken += 1;
            continue;
        }
        let t = sluice::reference_env::translate(env)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let args = std::iter::once("sluice".to_owned()).chain(t.args.clone());
        if let Err(e) = sluice::cli::Cli::try_parse_from(args) {
            panic!("{}: {:?}: {e}", path.display(), t.args);
        }
        taken += 1;
    }
    assert_eq!(taken, 19);
}

/// Where a Deployment's hosts and files are, here.
struct StandIns<'a> {
    certs: &'a Path,
    xds: u16,
    redis: &'a RedisServer,
    prometheus: u16,
    trace_collector: u16,
}

/// The Deployment's environment with each host and file it names pointed
/// at a stand-in, and its listeners moved to loopback ports; nothing else
/// changes. Redis over TLS is also given the stand-in's CA
/// (`REDIS_TLS_CACERT`), as a real one would be trusted through the
/// public roots.
fn stand_in(env: &[(String, String)], s: &StandIns<'_>, ports: [u16; 3]) -> Vec<(String, String)> {
    let certs = s.certs.display();
    let mut out: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| {
            let v = match k.as_str() {
                "REDIS_URL" => format!("127.0.0.1:{}", s.redis.port),
                "CONFIG_GRPC_XDS_SERVER_URL" => format!("localhost:{}", s.xds),
                "PROMETHEUS_ADDR" => format!("127.0.0.1:{}", s.prometheus),
                "PROMETHEUS_MAPPER_YAML" => format!("{certs}/statsd_conf.yaml"),
                "OTEL_EXPORTER_OTLP_ENDPOINT" => format!("http://127.0.0.1:{}", s.trace_collector),
                _ => match v
                    .strip_prefix("/certs/")
                    .or_else(|| v.strip_prefix("/redis-certs/"))
                {
                    Some(file) => format!("{certs}/{file}"),
                    None => v.clone(),
                },
            };
            (k.clone(), v)
        })
        .collect();
    if env.iter().any(|(k, v)| k == "REDIS_TLS" && v == "true") {
        let ca = s.redis.dir().join("ca.pem").display().to_string();
        out.push(("REDIS_TLS_CACERT".into(), ca));
    }
    let [http, grpc, debug] = ports.map(|p| p.to_string());
    for (k, v) in [
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", http),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", grpc),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", debug),
        // What these tests prove is the start, the rules and mutual TLS,
        // not the store's 20 ms deadline: on a loaded host a first call
        // over TLS can run past it and be shed, as it should be. An
        // operator adds a variable the same way.
        ("SLUICE_REDIS_TIMEOUT", "2s".into()),
    ] {
        out.push((k.into(), v));
    }
    out
}

/// The Redis a Deployment asks for: TLS and a password as it says.
fn redis_for(env: &[(String, String)]) -> RedisServer {
    let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    match (var("REDIS_TLS") == Some("true"), var("REDIS_AUTH")) {
        (false, None) => RedisServer::start(),
        (true, Some(pw)) => RedisServer::start_tls_with(&["--requirepass", pw], &["--pass", pw]),
        (true, None) => RedisServer::start_tls_with(&[], &[]),
        (false, Some(_)) => panic!("a password without TLS: add a stand-in for it"),
    }
}

/// Two decisions on `k=v` over mutual TLS with the client certificate in
/// `certs`' directory: the first admitted, the second over a limit of 1.
fn decides_over_mutual_tls(dir: &Path, grpc: u16) -> Vec<i32> {
    let read = |f: &str| std::fs::read(dir.join(f)).expect("cert");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.pem")))
            .identity(tonic::transport::Identity::from_pem(read("client.pem"), read("client.key")))
            .domain_name("localhost");
        let channel = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{grpc}"))
            .expect("endpoint")
            .tls_config(tls)
            .expect("tls")
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("mutual TLS connects");
        let mut c = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
        let mut codes = Vec::new();
        for _ in 0..2 {
            let r = c
                .should_rate_limit(super::common::request("xds", vec![super::common::descriptor(&[("k", "v")])]))
                .await
                .expect("decided");
            codes.push(r.into_inner().overall_code);
        }
        codes
    })
}

/// Each Deployment started for real, as Envoy Gateway starts the
/// reference: `ratelimit`, no arguments, only its environment.
#[test]
fn every_envoy_gateway_deployment_starts_and_decides() {
    let mut report = Vec::new();
    for (path, env) in deployments() {
        report.push(one_deployment(&path, &env));
    }
    eprintln!("{}", report.join("\n"));
    assert_eq!(report.len(), 19, "{report:?}");
}

/// One Deployment started with its environment (stand-ins for what it
/// names): up, healthy, its rules taken over xDS, deciding over mutual TLS
/// on the store; a Sentinel one refused at start. What it did, in a line.
fn one_deployment(path: &Path, env: &[(String, String)]) -> String {
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = secret(dir.path());
    let redis = redis_for(env);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _enter = rt.enter();
    let tls = xds_server_tls(dir.path());
    let xds = free_port();
    let ads = Ads::default();
    ads.push("v1", &[config(3, 1)]);
    let _server = serve_tls(ads.clone(), ([127, 0, 0, 1], xds).into(), Some(tls));
    let stand_ins = StandIns {
        certs: &certs,
        xds,
        redis: &redis,
        prometheus: free_port(),
        trace_collector: free_port(),
    };
    let ports = [free_port(), free_port(), free_port()];
    let env = stand_in(env, &stand_ins, ports);
    let mut sluice = start_binary(dir.path(), &env);
    if is_sentinel(&env) {
        // Refused at start, naming the variable (see above).
        let exited = eventually(Duration::from_secs(10), || {
            sluice
                .child
                .try_wait()
                .is_ok_and(|s| s.is_some_and(|s| !s.success()))
        });
        assert!(
            exited && sluice.log().contains("REDIS_URL"),
            "{name}: {}",
            sluice.log()
        );
        return format!("{name}: refused at start, naming REDIS_URL");
    }
    up_healthy_and_deciding(dir.path(), &name, ports, &ads, &mut sluice);
    format!("{name}: up, healthy, rules over xDS, decides over mutual TLS")
}

/// A started Deployment passes its health check, takes the pushed rules,
/// decides on the store (not a failure policy) over mutual TLS, OK then
/// OVER_LIMIT, and stays up.
fn up_healthy_and_deciding(
    dir: &Path,
    name: &str,
    ports: [u16; 3],
    ads: &Ads,
    sluice: &mut super::Running,
) {
    let healthy = eventually(Duration::from_secs(30), || {
        get(ports[0], "/healthcheck") == (200, "OK".into())
    });
    assert!(
        healthy,
        "{name}: /healthcheck never passed: {}",
        sluice.log()
    );
    assert!(
        eventually(Duration::from_secs(20), || ads
            .answer("v1")
            .is_some_and(|a| a.error_detail.is_none())),
        "{name}: the pushed rules were never taken: {}",
        sluice.log()
    );
    // Decided by the store, not by a failure policy.
    let ready = get(ports[0], "/readyz").1;
    assert!(
        ready.contains("\"healthy\":true"),
        "{name}: the store: {ready}"
    );
    let codes = decides_over_mutual_tls(dir, ports[1]);
    assert_eq!(
        codes,
        [1, 2],
        "{name}: OK then OVER_LIMIT: {}",
        sluice.log()
    );
    assert!(
        sluice.child.try_wait().is_ok_and(|s| s.is_none()),
        "{name}: still up"
    );
}
