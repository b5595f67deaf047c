//! Envoy Gateway's ratelimit Deployment with only the image changed: sluice
//! started as `ratelimit` with exactly the environment Envoy Gateway renders
//! (its variables, TLS files from openssl), a management server on the real
//! xDS protos that requires sluice's client certificate, a real Envoy whose
//! ratelimit cluster speaks mutual TLS to sluice, Redis, and a statsd
//! receiver on port 9125. The readiness probe passes, the pushed rules
//! decide, the stats arrive under the reference's names and the counters
//! under the reference's keys.
//!
//! The same run against the container image (`/bin/ratelimit`, the certs
//! mounted at `/certs` as Envoy Gateway mounts them) is `in_the_image`,
//! which the compose test runs with `SLUICE_TEST_IMAGE` set.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::ads::{Ads, config, serve_tls};
use common::redis::{RedisServer, command, free_port};
use common::stack::{mtls_envoy, start_upstream};
use common::{certificates, eventually, sluice_bin};

/// Where the statsd receiver listens: Envoy Gateway's statsd exporter port,
/// on a loopback address of this test's own.
const STATSD: &str = "127.0.9.125:9125";

/// The listeners Envoy Gateway leaves at the reference's defaults
/// (0.0.0.0:8080, 8081, 6070), moved to loopback ports for the test.
struct Ports {
    http: u16,
    grpc: u16,
    debug: u16,
    prometheus: u16,
}

/// Envoy Gateway's environment (internal/infrastructure/kubernetes/
/// ratelimit/resource.go, with statsd on), `certs` its `/certs` mount.
fn envoy_gateway_env(certs: &str, xds: SocketAddr, redis: u16, p: &Ports) -> Vec<(String, String)> {
    let vars = [
        ("RUNTIME_ROOT", "/data".to_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "true".into()),
        ("STATSD_HOST", "127.0.9.125".into()),
        ("STATSD_PORT", "9125".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        (
            "CONFIG_GRPC_XDS_SERVER_URL",
            format!("localhost:{}", xds.port()),
        ),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", format!("{certs}/tls.crt")),
        ("GRPC_SERVER_TLS_KEY", format!("{certs}/tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", format!("{certs}/ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            format!("{certs}/tls.crt"),
        ),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", format!("{certs}/tls.key")),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            format!("{certs}/ca.crt"),
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{redis}")),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!("127.0.0.1:{}", p.prometheus)),
        // Envoy Gateway mounts its statsd_exporter mapping from a
        // ConfigMap; here it sits beside the certificates.
        (
            "PROMETHEUS_MAPPER_YAML",
            format!("{certs}/statsd_conf.yaml"),
        ),
        // Only for the test: loopback instead of 0.0.0.0.
        ("HOST", "127.0.0.1".into()),
        ("PORT", p.http.to_string()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", p.grpc.to_string()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", p.debug.to_string()),
        // Only for the test: a first Redis call on a loaded host can run
        // past the 20 ms default and be shed, which Envoy would admit.
        ("SLUICE_REDIS_TIMEOUT", "2s".into()),
    ];
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The certificates as Envoy Gateway's `envoy-rate-limit` secret holds
/// them: `tls.crt`/`tls.key` (sluice's server and xDS client identity) and
/// `ca.crt`, readable by the image's non-root user.
fn secret(dir: &Path) -> PathBuf {
    certificates(dir);
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("certs");
    for (from, to) in [
        ("server.pem", "tls.crt"),
        ("server.key", "tls.key"),
        ("ca.pem", "ca.crt"),
    ] {
        std::fs::copy(dir.join(from), certs.join(to)).expect("copy cert");
    }
    // Envoy Gateway's own statsd_exporter mapping (tests/compat).
    std::fs::copy(
        common::workspace().join("tests/compat/envoy-gateway/statsd_conf.yaml"),
        certs.join("statsd_conf.yaml"),
    )
    .expect("copy the mapping");
    common::sh(&certs, "chmod 755 . && chmod 644 *");
    certs
}

/// A process (or container) stopped when dropped.
struct Running {
    child: Child,
    container: Option<String>,
    log: PathBuf,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(name) = &self.container {
            let _ = Command::new("docker").args(["rm", "-f", name]).output();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// sluice as `ratelimit`: a link of that name to the binary, run with only
/// Envoy Gateway's environment.
fn start_binary(dir: &Path, env: &[(String, String)]) -> Running {
    let link = dir.join("bin").join("ratelimit");
    std::fs::create_dir_all(link.parent().expect("bin")).expect("bin dir");
    std::os::unix::fs::symlink(sluice_bin(), &link).expect("symlink");
    let log = dir.join("sluice.log");
    let out = std::fs::File::create(&log).expect("log");
    let child = Command::new(&link)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("spawn ratelimit");
    Running {
        child,
        container: None,
        log,
    }
}

/// The image started as Envoy Gateway starts it: `/bin/ratelimit`, the
/// secret at `/certs`, host networking so the loopback ports are the same.
fn start_image(image: &str, dir: &Path, env: &[(String, String)]) -> Running {
    let name = format!("sluice-eg-test-{}", std::process::id());
    let log = dir.join("sluice.log");
    let out = std::fs::File::create(&log).expect("log");
    let mut cmd = Command::new("docker");
    cmd.args(["run", "--rm", "--name", &name, "--network", "host"])
        .args(["--read-only", "--cap-drop", "ALL", "--user", "65534:65534"])
        .arg("-v")
        .arg(format!("{}:/certs:ro", dir.join("certs").display()))
        .args(["--entrypoint", "/bin/ratelimit"]);
    for (k, v) in env {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    let child = cmd
        .arg(image)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("docker run");
    Running {
        child,
        container: Some(name),
        log,
    }
}

/// Status and body, or 0 while nothing listens.
fn get(port: u16, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    match agent.get(format!("http://127.0.0.1:{port}{path}")).call() {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(_) => (0, String::new()),
    }
}

/// Statsd lines received until `want` all appear (the reference flushes
/// every 10 s).
fn stats_until(socket: &UdpSocket, want: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    let mut seen = String::new();
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline && !want.iter().all(|w| seen.contains(w)) {
        if let Ok(n) = socket.recv(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            seen.push('\n');
        }
    }
    seen
}

/// Envoy Gateway's xDS server side: its certificate, and sluice's client
/// certificate required (the CA in `dir`).
fn xds_server_tls(dir: &Path) -> tonic::transport::ServerTlsConfig {
    let read = |f: &str| std::fs::read(dir.join(f)).expect("cert");
    tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(
            read("server.pem"),
            read("server.key"),
        ))
        .client_ca_root(tonic::transport::Certificate::from_pem(read("ca.pem")))
}

fn run(start: impl FnOnce(&Path, &[(String, String)]) -> Running, certs_in_env: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = secret(dir.path());
    let statsd = UdpSocket::bind(STATSD).expect("statsd receiver on 9125");
    statsd
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let redis = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _enter = rt.enter();
    let tls = xds_server_tls(dir.path());
    let xds: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let ads = Ads::default();
    let _server = serve_tls(ads.clone(), xds, Some(tls));
    let ports = Ports {
        http: free_port(),
        grpc: free_port(),
        debug: free_port(),
        prometheus: free_port(),
    };
    let certs_path = certs_in_env.map_or_else(|| certs.display().to_string(), str::to_owned);
    let env = envoy_gateway_env(&certs_path, xds, redis.port, &ports);
    let sluice = start(dir.path(), &env);

    the_probes_and_ports_answer(&ports, &sluice);

    // The rules come over xDS, from a server that demands sluice's client
    // certificate; then Envoy, over mutual TLS, is limited by them.
    ads.push("v1", &[config(3, 3)]);
    assert!(
        eventually(Duration::from_secs(20), || ads.answer("v1").is_some()),
        "sluice never acknowledged the pushed rules: {}",
        sluice.log()
    );
    envoy_over_mutual_tls_is_limited(dir.path(), ports.grpc, &sluice);
    assert!(
        sluice.log().contains("mutual=true"),
        "client CA from GRPC_SERVER_TLS_CA_CERT"
    );
    // Its dashboard's series, named by its mapping file.
    let (_, metrics) = get(ports.prometheus, "/metrics");
    assert!(
        metrics.contains("ratelimit_service_rate_limit_over_limit{domain=\"xds\",key1=\"k\"} 1"),
        "{metrics}"
    );

    // The reference's names, in statsd and in Redis.
    let want = [
        "ratelimit.service.rate_limit.xds.k.total_hits:",
        "ratelimit.service.rate_limit.xds.k.over_limit:",
    ];
    let seen = stats_until(&statsd, &want, Duration::from_secs(25));
    assert!(want.iter().all(|w| seen.contains(w)), "statsd got: {seen}");
    let keys = command(redis.port, "KEYS *").unwrap_or_default();
    assert!(
        keys.contains("xds_k_v_"),
        "the reference's key format: {keys}"
    );
}

/// Envoy, over mutual TLS, is limited by the pushed rules: 3 an hour.
fn envoy_over_mutual_tls_is_limited(dir: &Path, grpc: u16, sluice: &Running) {
    let (mut upstream, up_port) = start_upstream();
    let (mut envoy, envoy_port) = mtls_envoy(dir, "eg", "xds", grpc, up_port, "client");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let status = || {
        agent
            .get(format!("http://127.0.0.1:{envoy_port}/"))
            .call()
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    // Up when its listener accepts: no request is spent finding out.
    assert!(
        eventually(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            envoy_port
        ))
        .is_ok()),
        "envoy up"
    );
    let codes: Vec<u16> = (0..4).map(|_| status()).collect();
    let _ = (envoy.kill(), upstream.kill(), envoy.wait(), upstream.wait());
    assert_eq!(
        codes,
        [200, 200, 200, 429],
        "xDS rules over mutual TLS: {}",
        sluice.log()
    );
}

/// The readiness probe: 200 OK once Redis has answered, before any rule
/// (FORCE_START_WITHOUT_INITIAL_CONFIG, as the reference); the debug port and
/// the reference's stats on PROMETHEUS_ADDR.
fn the_probes_and_ports_answer(ports: &Ports, sluice: &Running) {
    // The readiness probe: 200 OK once Redis has answered, before any rule
    // (FORCE_START_WITHOUT_INITIAL_CONFIG, as the reference).
    assert!(
        eventually(Duration::from_secs(30), || get(ports.http, "/healthcheck")
            == (200, "OK".into())),
        "readiness probe never passed: {}",
        sluice.log()
    );
    assert_eq!(get(ports.debug, "/rlconfig").0, 200, "debug port");
    let (code, metrics) = get(ports.prometheus, "/metrics");
    assert!(
        code == 200 && metrics.contains("ratelimit_service_config_load_success"),
        "PROMETHEUS_ADDR serves the reference's stats, mapped: {metrics}"
    );
}

#[test]
fn envoy_gateway_environment_runs_sluice_as_ratelimit() {
    run(start_binary, None);
}

/// Run by the compose test once the image is built (`SLUICE_TEST_IMAGE`).
#[test]
#[ignore = "needs Docker and the image: make compose-test runs it"]
fn in_the_image() {
    let image = std::env::var("SLUICE_TEST_IMAGE").expect("SLUICE_TEST_IMAGE");
    run(|dir, env| start_image(&image, dir, env), Some("/certs"));
}

#[path = "envoy_gateway/deployments.rs"]
mod deployments;
#[path = "envoy_gateway/shutdown.rs"]
mod shutdown;
