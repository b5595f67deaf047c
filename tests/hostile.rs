//! Hostile input against the real binary: oversized and overlong requests get
//! INVALID_ARGUMENT with a message and leave the service answering; values
//! built to collide never share a counter; secrets never reach the logs.

mod common;

use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use tonic::Code as GrpcCode;

const RULES: &str = "
domain: web
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: email
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
";

async fn invalid(
    s: &Sluice,
    req: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest,
) -> String {
    let mut c = s.client().await;
    let e = c.should_rate_limit(req).await.expect_err("refused");
    assert_eq!(e.code(), GrpcCode::InvalidArgument, "{e:?}");
    e.message().to_owned()
}

#[tokio::test]
async fn oversized_requests_are_invalid_and_harmless() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--max-request-bytes",
            "4096",
            "--max-descriptors",
            "4",
            "--max-value-bytes",
            "100",
        ],
    );
    let big = "x".repeat(8000);
    let msg = invalid(&s, request("web", vec![descriptor(&[("k", &big)])])).await;
    assert!(msg.contains("too large"), "{msg}");
    let msg = invalid(&s, request("web", vec![descriptor(&[("k", "v")]); 5])).await;
    assert!(msg.contains("--max-descriptors"), "{msg}");
    let msg = invalid(
        &s,
        request("web", vec![descriptor(&[("k", &"v".repeat(101))])]),
    )
    .await;
    assert!(msg.contains("--max-value-bytes"), "{msg}");
    // And the service still answers, counting as before.
    let mut c = s.client().await;
    assert_eq!(ask(&mut c, "web", &[("k", "after")]).await.overall_code, OK);
    assert_eq!(
        ask(&mut c, "web", &[("k", "after")]).await.overall_code,
        OVER
    );
}

type Descriptor = Vec<(&'static str, String)>;

/// Pairs of descriptors that a key built by joining parts with a separator
/// would merge. Each pair must keep two counters of limit 1: both first
/// requests pass.
#[tokio::test]
async fn crafted_values_never_share_a_counter() {
    let redis = RedisServer::start();
    let memory = Sluice::start(&[("web.yaml", RULES)], &[]);
    let on_redis = Sluice::start(
        &[("web.yaml", RULES)],
        &["--redis-url", &redis.url(), "--redis-timeout", "2s"],
    );
    let long = "z".repeat(1000);
    let pairs: Vec<(Descriptor, Descriptor)> = vec![
        (
            vec![("k", "a_b".into())],
            vec![("k", "a".into()), ("k", "b".into())],
        ),
        (
            vec![("a", "x_b".into()), ("b", "y".into())],
            vec![("a", "x".into()), ("b", "b_y".into())],
        ),
        (
            vec![("a", "".into()), ("b", "x".into())],
            vec![("a", "x".into()), ("b", "".into())],
        ),
        (vec![("k", "*".into())], vec![("k", "anything".into())]),
        (vec![("k", ":".into())], vec![("k", "\u{0}".into())]),
        (vec![("k", long.clone())], vec![("k", format!("{long}z"))]),
        (vec![("k", "é".into())], vec![("k", "e\u{301}".into())]),
    ];
    for s in [&memory, &on_redis] {
        let mut c = s.client().await;
        for (i, (x, y)) in pairs.iter().enumerate() {
            let as_refs = |d: &Vec<(&'static str, String)>| {
                d.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>()
            };
            for d in [as_refs(x), as_refs(y)] {
                let entries: Vec<(&str, &str)> = d.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let r = ask(&mut c, "web", &entries).await;
                assert_eq!(r.overall_code, OK, "pair {i}: {entries:?} shared a counter");
            }
        }
        // A unit change is a new counter too (per-request overrides).
        for unit in [3, 4] {
            let r = c
                .should_rate_limit(request(
                    "web",
                    vec![descriptor_with_limit(&[("u", "same")], 1, unit)],
                ))
                .await
                .expect("rpc")
                .into_inner();
            assert_eq!(r.overall_code, OK, "unit {unit}");
        }
    }
}

#[tokio::test]
async fn no_secret_or_address_in_logs_or_metrics() {
    let redis = RedisServer::start_tls();
    let url = format!("rediss://app:pw@127.0.0.1:{}/#insecure", redis.port);
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--redis-url",
            &url,
            "--log-level",
            "debug",
            "--key-hash-secret",
            "hash-secret-value",
        ],
    );
    let mut c = s.client().await;
    for _ in 0..7 {
        ask(&mut c, "web", &[("email", "Person.Name+x@Example.com")]).await;
    }
    // Polled: the line that names the store may come after the asks (a
    // stressed run had not logged it yet).
    assert!(
        eventually(Duration::from_secs(10), || s.logs_contain("app:***@")),
        "the masked URL is logged"
    );
    let (_, metrics) = s.get("/metrics");
    let (_, ready) = s.get("/readyz");
    let logs = s.logs.lock().expect("logs").join("\n");
    for (what, text) in [("logs", &logs), ("metrics", &metrics), ("readyz", &ready)] {
        let lower = text.to_lowercase();
        assert!(!lower.contains("example.com"), "address in {what}");
        assert!(!lower.contains("person.name"), "address in {what}");
        assert!(!text.contains("app:pw"), "Redis password in {what}");
        assert!(!text.contains("hash-secret-value"), "hash secret in {what}");
    }
}
