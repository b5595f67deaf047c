//! A rolling update under load drops nothing: two sluice instances on one
//! Redis behind Envoy's ratelimit filter (which never retries a call; here
//! a failed call is a 500), each SIGTERMed and restarted in turn while
//! clients send throughout. Envoy's active gRPC health check stands in for
//! Kubernetes taking a not-ready pod out of the endpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::*;
use common::Sluice;
use common::redis::{RedisServer, free_port};
use common::stack::{envoy_stat, spawn_envoy, start_upstream};

/// The shutdown delay the Helm chart ships.
const DELAY: &str = "5s";

const RULES: &str = "domain: roll\ndescriptors:\n  - key: roll\n    value: on\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n";

/// Envoy on `port` (`tests/envoy/rolling.yaml`), asking the two instances
/// round robin (each dropped while its gRPC health says NOT_SERVING),
/// failing a request whose call fails.
fn envoy_config(port: u16, admin: u16, upstream: u16, sluices: [u16; 2]) -> String {
    let endpoint = |p: u16| {
        format!(
            "        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {p}}}}}}}"
        )
    };
    include_str!("rolling.yaml")
        .replace("ADMIN", &admin.to_string())
        .replace("PORT", &port.to_string())
        .replace("SLUICE_A", &endpoint(sluices[0]))
        .replace("SLUICE_B", &endpoint(sluices[1]))
        .replace("UPSTREAM", &endpoint(upstream))
}

/// Sends through Envoy until `stop`, counting requests and those that did
/// not come back 200.
fn sender(port: u16, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>, failed: Arc<AtomicU64>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    while !stop.load(Relaxed) {
        let r = agent.get(&format!("http://127.0.0.1:{port}/roll")).call();
        sent.fetch_add(1, Relaxed);
        match r {
            Ok(r) if r.status() == 200 => {}
            other => {
                failed.fetch_add(1, Relaxed);
                eprintln!("failed: {:?}", other.map(|r| r.status()));
            }
        }
    }
}

fn start_one(rules: &std::path::Path, grpc: &str, redis: &RedisServer) -> Sluice {
    let url = redis.url();
    let s = Sluice::start_at(
        rules,
        grpc,
        &["--redis-url", &url, "--shutdown-delay", DELAY],
    );
    assert!(
        eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
        "sluice never reached Redis"
    );
    s
}

/// Decisions the instance has answered.
fn answered(s: &Sluice) -> f64 {
    common::metric_sum(&s.get("/metrics").1, "sluice_requests_total")
}

#[test]
fn a_rolling_restart_under_load_fails_no_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).expect("mkdir");
    std::fs::write(rules.join("roll.yaml"), RULES).expect("rules");
    let redis = RedisServer::start();
    let ports = [free_port(), free_port()];
    let addr = |p: u16| format!("127.0.0.1:{p}");
    let mut fleet = ports.map(|p| Some(start_one(&rules, &addr(p), &redis)));
    let (_upstream, upstream_port) = start_upstream();
    let (port, admin) = (free_port(), free_port());
    let config = dir.path().join("envoy.yaml");
    std::fs::write(&config, envoy_config(port, admin, upstream_port, ports)).expect("config");
    let mut envoy = spawn_envoy(&config, &dir.path().join("envoy.log"));
    let up = || std::net::TcpStream::connect(("127.0.0.1", admin)).is_ok();
    assert!(
        eventually(Duration::from_secs(30), up),
        "envoy never started"
    );
    let healthy = || envoy_stat(admin, "cluster.sluice.membership_healthy") == 2;
    assert!(
        eventually(Duration::from_secs(30), healthy),
        "envoy never saw both"
    );
    let (stop, sent, failed) = (Arc::default(), Arc::default(), Arc::default());
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (stop, sent, failed) = (Arc::clone(&stop), Arc::clone(&sent), Arc::clone(&failed));
            std::thread::spawn(move || sender(port, stop, sent, failed))
        })
        .collect();
    for (i, p) in ports.into_iter().enumerate() {
        let mut old = fleet[i].take().expect("running");
        old.signal("TERM");
        assert!(old.wait(Duration::from_secs(30)).success(), "exit 0");
        let new = start_one(&rules, &addr(p), &redis);
        assert!(
            eventually(Duration::from_secs(30), healthy),
            "envoy never saw it back"
        );
        let before = answered(&new);
        assert!(
            eventually(Duration::from_secs(30), || answered(&new) > before + 20.0),
            "the restarted instance was never asked"
        );
        fleet[i] = Some(new);
    }
    stop.store(true, Relaxed);
    for s in senders {
        s.join().expect("sender");
    }
    let _ = envoy.kill();
    let _ = envoy.wait();
    let (sent, failed) = (sent.load(Relaxed), failed.load(Relaxed));
    eprintln!("a rolling restart: {sent} requests sent, {failed} failed");
    assert!(sent > 200, "{sent} requests sent");
    assert_eq!(failed, 0, "of {sent} requests through a rolling restart");
}
