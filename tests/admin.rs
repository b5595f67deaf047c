//! Admin endpoints, gRPC health, the CLI and shutdown, on the real binary.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const RULES: &str = "
domain: web
descriptors:
  - key: ip
    rate_limit: {name: per_ip, unit: hour, requests_per_unit: 2}
  - key: email
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
";

#[test]
fn json_endpoint_answers_200_429_and_400() {
    let s = Sluice::start(&[("web.yaml", RULES)], &[]);
    let body = r#"{"domain":"web","descriptors":[{"entries":[{"key":"ip","value":"1.2.3.4"}]}]}"#;
    let (code, text) = s.post("/json", body);
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(v["statuses"][0]["currentLimit"]["name"], "per_ip");
    assert_eq!(v["statuses"][0]["limitRemaining"], 1);
    assert_eq!(s.post("/json", body).0, 200);
    let (code, text) = s.post("/json", body);
    assert_eq!(code, 429);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["responseHeadersToAdd"][0]["key"], "Retry-After");

    let (code, text) = s.post("/json", "}");
    assert_eq!(code, 400);
    assert!(text.contains("invalid RateLimitRequest JSON"), "{text}");
    let (code, text) = s.post("/json", r#"{"domain":"","descriptors":[{"entries":[]}]}"#);
    assert_eq!(
        (code, text.trim()),
        (400, "rate limit domain must not be empty")
    );
    let (code, text) = s.post("/json", r#"{"domain":"web","descriptors":[]}"#);
    assert_eq!(
        (code, text.trim()),
        (400, "rate limit descriptor list must not be empty")
    );
}

#[test]
fn readyz_metrics_rlconfig_and_healthz() {
    let s = Sluice::start(&[("web.yaml", RULES)], &[]);
    assert_eq!(s.get("/healthz"), (200, "OK".to_owned()));
    let (code, text) = s.get("/readyz");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "ready");
    assert_eq!(v["store"]["backend"], "memory");
    assert_eq!(v["store"]["healthy"], true);
    assert_eq!(v["config"]["generation"], 1);
    assert_eq!(v["config"]["last_error"], serde_json::Value::Null);
    assert_eq!(v["config"]["domains"][0]["domain"], "web");

    let (code, text) = s.get("/rlconfig");
    assert_eq!(code, 200);
    assert_eq!(
        text,
        "web.email: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
         web.ip: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );

    for _ in 0..3 {
        s.post(
            "/json",
            r#"{"domain":"web","descriptors":[{"entries":[{"key":"ip","value":"10.0.0.1"}]}]}"#,
        );
    }
    s.post(
        "/json",
        r#"{"domain":"web","descriptors":[{"entries":[{"key":"email","value":"a@example.com"}]}]}"#,
    );
    the_metrics_count_per_rule_and_hide_values(&s);
}

/// What `/metrics` says of three requests to `ip` and one to `email`: each
/// rule's series, runtime values out of labels, an email hashed.
fn the_metrics_count_per_rule_and_hide_values(s: &Sluice) {
    let (code, text) = s.get("/metrics");
    assert_eq!(code, 200);
    let series = |name: &str, rule: &str| {
        metric(
            &text,
            &format!("sluice_rule_{name}_total{{domain=\"web\",rule=\"{rule}\"}}"),
        )
    };
    assert_eq!(series("total_hits", "ip"), Some(3.0));
    assert_eq!(series("within_limit", "ip"), Some(2.0));
    assert_eq!(series("over_limit", "ip"), Some(1.0));
    assert_eq!(series("near_limit", "ip"), Some(1.0));
    assert!(
        !text.contains("10.0.0.1"),
        "runtime values stay out of labels"
    );
    // detailed_metric asks for values in labels, but an email's is hashed.
    let hashed = sluice::privacy::Privacy::default().protect("a@example.com");
    assert_eq!(series("total_hits", &format!("email_{hashed}")), Some(1.0));
    assert!(!text.contains("example.com"), "no address in clear");
    assert_eq!(
        metric(&text, "sluice_requests_total{code=\"over_limit\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "sluice_request_duration_seconds_count"),
        Some(4.0)
    );
    assert_eq!(metric(&text, "sluice_config_loads_total"), Some(1.0));
    assert_eq!(metric(&text, "sluice_config_generation"), Some(1.0));
}

// Multi-threaded so the client's connection task can answer the server's
// GOAWAY while the test thread blocks waiting for the process to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_serves_both_names_and_shutdown_is_graceful() {
    let mut s = Sluice::start(&[("web.yaml", RULES)], &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let mut watch = h
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);

    s.signal("TERM");
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message()).await;
    let m = next
        .expect("a health update")
        .expect("stream")
        .expect("message");
    assert_eq!(
        m.status,
        ServingStatus::NotServing as i32,
        "health goes NOT_SERVING on shutdown"
    );
    drop(watch);
    let status = s.wait(Duration::from_secs(15));
    assert!(status.success(), "exit 0 after SIGTERM, got {status:?}");
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("shutdown started")));
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("sluice stopped")));
}

#[test]
fn sigint_also_stops_cleanly() {
    let mut s = Sluice::start(&[("web.yaml", RULES)], &[]);
    s.signal("INT");
    assert!(s.wait(Duration::from_secs(15)).success());
}

#[test]
fn invalid_config_at_startup_exits_before_listening() {
    let dir = config_dir(&[(
        "bad.yaml",
        "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: fortnight}\n",
    )]);
    let out = Command::new(sluice_bin())
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "bad.yaml:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"
        ),
        "{err}"
    );
    assert!(!err.contains("sluice listening"), "{err}");
}

#[test]
fn check_prints_domains_or_errors() {
    let dir = config_dir(&[
        ("web.yaml", RULES),
        ("b.yaml", "domain: other\ndescriptors:\n  - key: k\n"),
    ]);
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "other: 0 rules\nweb: 2 rules\n"
    );

    let split = config_dir(&[
        ("a.yaml", RULES),
        ("b.yaml", "domain: web\ndescriptors:\n  - key: k\n"),
    ]);
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(split.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate domain 'web' in config file"));
    let out = Command::new(sluice_bin())
        .args(["check", "--merge-domains"])
        .arg(split.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(split.path())
        .env("SLUICE_MERGE_DOMAINS", "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "flags are read from SLUICE_* too");

    let shaped = config_dir(&[(
        "s.yaml",
        "domain: s\ndescriptors:\n  - key: k\n    rate_limit: {window: 90s, requests_per_unit: 3, algorithm: token_bucket, burst: 5}\n",
    )]);
    let out = Command::new(sluice_bin())
        .args(["check", "--rules"])
        .arg(shaped.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "s: 1 rules\n  s.k: window=90s requests_per_unit=3 algorithm=token_bucket burst=5, shadow_mode: false, quota_mode: false\n"
    );
}

/// `sluice check` says which rules trade exactness (`count_after`, or all
/// fixed windows under `--count-after`), and refuses it where it cannot
/// apply.
#[test]
fn check_names_the_rules_that_count_after() {
    let rules = "domain: c\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100, count_after: true}\n  - key: exact\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: bucket\n    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}\n";
    let dir = config_dir(&[("c.yaml", rules)]);
    let check = |extra: &[&str]| {
        let out = Command::new(sluice_bin())
            .args(["check", "--rules"])
            .args(extra)
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, err) = check(&[]);
    assert!(err.contains("note: c: 1 rules count after"), "{err}");
    assert!(err.contains("instances x credit"), "{err}");
    assert!(
        out.contains("c.user: unit=HOUR requests_per_unit=100 count_after=true,"),
        "{out}"
    );
    assert!(
        !out.contains("c.exact: unit=HOUR requests_per_unit=100 count_after"),
        "{out}"
    );
    // Every fixed window under --count-after; never the bucket.
    let (out, err) = check(&["--count-after"]);
    assert!(err.contains("note: c: 2 rules count after"), "{err}");
    assert!(!out.contains("token_bucket burst=100 count_after"), "{out}");

    let bad = config_dir(&[(
        "b.yaml",
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window, count_after: true}\n",
    )]);
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(bad.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rate_limit.count_after: count_after is only for fixed windows"),
        "{err}"
    );
}

#[test]
fn shipped_descriptors_are_valid() {
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(workspace().join("descriptors"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_unix_socket_replaces_only_a_stale_socket_and_is_removed_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let rules = common::config_dir(&[("a.yaml", "domain: a\ndescriptors:\n  - key: k\n")]);
    // Any other file at the path is refused, never deleted.
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let out = std::process::Command::new(common::sluice_bin())
        .args(["serve", "--admin-addr", "127.0.0.1:0", "--grpc-uds"])
        .arg(&file)
        .arg("--config")
        .arg(rules.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists and is not a socket"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A socket left behind by a crash is replaced.
    let sock = dir.path().join("sluice.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let sock_arg = sock.display().to_string();
    // Under a permissive umask the socket still gets --grpc-uds-mode (660).
    let mut s = Sluice::start_at_env_shell(rules.path(), "umask 000", &["--grpc-uds", &sock_arg]);
    assert_eq!(s.grpc_uds.as_deref(), Some(sock.as_path()));
    assert!(std::os::unix::net::UnixStream::connect(&sock).is_ok());
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660, "{mode:o}");
    }
    s.signal("TERM");
    assert!(s.wait(Duration::from_secs(10)).success());
    assert!(!sock.exists(), "the socket is removed on a clean exit");
}
