//! Hostile data against the store path: a poisoned counter or hits value
//! fails only its own request; a store that answers PING but not scripts,
//! answers garbage or answers short is never taken for healthy and never
//! admits by default.

mod common;

use std::time::Duration;

use common::fake_redis::{FakeRedis, handshake};
use common::redis::RedisServer;
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::Code as GrpcCode;

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
";

fn trips(s: &Sluice) -> f64 {
    metric(&s.get("/metrics").1, "sluice_store_circuit_trips_total").unwrap_or(-1.0)
}

#[tokio::test]
async fn hits_beyond_the_bound_are_invalid_arguments() {
    let s = Sluice::start(&[("shop.yaml", RULES)], &["--max-hits", "1000"]);
    let mut c = s.client().await;
    let mut d = descriptor(&[("ip", "a")]);
    d.hits_addend = Some(UInt64Value { value: 1 << 63 });
    let e = c
        .should_rate_limit(request("shop", vec![d]))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert!(e.message().contains("--max-hits"), "{}", e.message());
    let req = RateLimitRequest {
        hits_addend: 1001,
        ..request("shop", vec![descriptor(&[("ip", "a")])])
    };
    let e = c.should_rate_limit(req).await.expect_err("refused");
    assert!(e.message().contains("--max-hits"), "{}", e.message());
    assert_eq!(ask(&mut c, "shop", &[("ip", "a")]).await.overall_code, OK);
}

/// Counters that Redis refuses (one that would overflow, one holding a
/// string) are their own requests' business: honest requests batched with
/// them are counted, and the breaker never trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_counter_fails_only_its_own_request() {
    let redis = RedisServer::start();
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &[
            "--redis-url",
            &redis.url(),
            "--key-format",
            "envoyproxy",
            "--store-failure",
            "deny",
            "--redis-timeout",
            "2s",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
    poison(&redis);
    let c = s.client().await;
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let ip = match i % 3 {
                    0 => "full".to_owned(),
                    1 => "list".to_owned(),
                    _ => format!("honest{i}"),
                };
                (
                    i % 3,
                    ask(&mut c, "shop", &[("ip", &ip)]).await.overall_code,
                )
            })
        })
        .collect();
    for t in tasks {
        let (kind, code) = t.await.unwrap();
        match kind {
            // Past i64::MAX is past any limit.
            0 => assert_eq!(code, OVER),
            // Decided by the policy (deny), for this request alone.
            1 => assert_eq!(code, OVER),
            _ => assert_eq!(code, OK, "an honest request paid for a poisoned one"),
        }
    }
    assert_eq!(s.status(), "ready");
    assert_eq!(trips(&s), 0.0);
    let m = s.get("/metrics").1;
    assert!(metric(&m, "sluice_store_errors_total{kind=\"rejected\"}").unwrap() >= 100.0);
    assert_eq!(
        metric(&m, "sluice_store_errors_total{kind=\"error\"}"),
        Some(0.0)
    );
}

/// Poisons the reference's counters of `ip=full` (at i64::MAX) and
/// `ip=list` (not a number) in this hour and the next.
fn poison(redis: &RedisServer) {
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        * 3600;
    for h in [hour, hour + 3600] {
        redis.cli(&["set", &format!("shop_ip_full_{h}"), &i64::MAX.to_string()]);
        redis.cli(&["lpush", &format!("shop_ip_list_{h}"), "x"]);
    }
}

/// A Redis user that may PING but not run scripts: the store is down for
/// sluice's purposes, and stays down without flapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_scripts_is_down_and_does_not_flap() {
    let redis = RedisServer::start();
    redis.cli(&[
        "acl", "setuser", "noscript", "on", ">pw", "~*", "+@all", "-evalsha", "-eval",
    ]);
    let url = format!("redis://noscript:pw@127.0.0.1:{}", redis.port);
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &["--redis-url", &url, "--redis-timeout", "500ms"],
    );
    let mut c = s.client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut admitted = 0;
    while std::time::Instant::now() < deadline {
        admitted += usize::from(ask(&mut c, "shop", &[("ip", "x")]).await.overall_code == OK);
        assert_ne!(
            s.status(),
            "ready",
            "a Redis that refuses scripts is not ready"
        );
    }
    // Counted by the fallback: the limit holds in this instance.
    assert_eq!(admitted, 3);
    assert_eq!(trips(&s), 0.0, "never taken back, so never tripped again");
    let (_, text) = s.get("/readyz");
    assert!(
        text.contains("NOPERM") || text.contains("permission"),
        "{text}"
    );
}

/// Asks `ip=value` until `/readyz` says one of `words` (the store's own, or
/// sluice's about it), never ready meanwhile. Polled: a loaded machine
/// answered 20 requests before sluice first connected, while /readyz still
/// said "not connected yet".
async fn told_while_asking(
    s: &Sluice,
    c: &mut RateLimitServiceClient<tonic::transport::Channel>,
    value: &str,
    words: &[&str],
) {
    for _ in 0..500 {
        let text = s.get("/readyz").1;
        if words.iter().any(|w| text.contains(w)) {
            return;
        }
        ask(c, "shop", &[("ip", value)]).await;
        assert_ne!(s.status(), "ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never told {words:?}: {}", s.get("/readyz").1);
}

/// A Redis out of memory answers PING and reads, but no write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_down() {
    let redis = RedisServer::start();
    redis.cli(&["config", "set", "maxmemory-policy", "noeviction"]);
    redis.cli(&["debug", "populate", "20000", "fill", "100"]);
    redis.cli(&["config", "set", "maxmemory", "1"]);
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &["--redis-url", &redis.url(), "--redis-timeout", "500ms"],
    );
    let mut c = s.client().await;
    told_while_asking(&s, &mut c, "y", &["OOM"]).await;
    for _ in 0..20 {
        ask(&mut c, "shop", &[("ip", "y")]).await;
        assert_ne!(s.status(), "ready");
    }
    // Memory freed: counting in Redis resumes.
    redis.cli(&["config", "set", "maxmemory", "0"]);
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
}

/// Answers to the increment script that do not fit the call: nothing is
/// admitted on a missing count, and the store is reported down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_and_garbage_replies_never_admit() {
    for reply in [
        &b"*0\r\n"[..],
        b"*1\r\n:1\r\n",
        b"+what\r\n",
        b"*2\r\n$3\r\nabc\r\n:-7\r\n",
    ] {
        let fake = FakeRedis::start(move |cmd| handshake(cmd).unwrap_or_else(|| reply.to_vec()));
        let s = Sluice::start(
            &[("shop.yaml", RULES)],
            &["--redis-url", &fake.url(), "--redis-timeout", "200ms"],
        );
        let mut c = s.client().await;
        let mut admitted = 0;
        for _ in 0..20 {
            let r = ask(&mut c, "shop", &[("ip", "z")]).await;
            admitted += usize::from(r.overall_code == OK);
        }
        assert_eq!(admitted, 3, "reply {:?}", String::from_utf8_lossy(reply));
        assert_ne!(s.status(), "ready");
        told_while_asking(&s, &mut c, "z", &["malformed", "probe"]).await;
        // No connection storm: one pool per probe, probes backed off.
        assert!(fake.connections.load(std::sync::atomic::Ordering::Relaxed) < 50);
    }
}

/// A concurrency counter's usage key (the advisor's figure beside the
/// slots) holding a list or garbage never fails a request nor trips the
/// breaker: the decision stands, and only that usage goes uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_usage_key_fails_nothing() {
    const SLOTS: &str = "
domain: shop
descriptors:
  - key: slots
    descriptors:
      - key: id
        rate_limit: {algorithm: concurrency, max_in_flight: 3, lease: 10m}
";
    let redis = RedisServer::start();
    let s = Sluice::start(
        &[("shop.yaml", SLOTS)],
        &["--redis-url", &redis.url(), "--redis-timeout", "2s"],
    );
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
    let mut c = s.client().await;
    let mut take = async |id: &str| {
        ask(&mut c, "shop", &[("slots", "s"), ("id", id)])
            .await
            .overall_code
    };
    assert_eq!(take("1").await, OK);
    let usage: Vec<String> = redis
        .counter_keys()
        .into_iter()
        .filter(|k| k.ends_with(":usage"))
        .collect();
    assert_eq!(usage.len(), 1, "{usage:?}");
    redis.cli(&["del", &usage[0]]);
    redis.cli(&["lpush", &usage[0], "x"]);
    assert_eq!(take("2").await, OK);
    redis.cli(&["del", &usage[0]]);
    redis.cli(&["set", &usage[0], "not a count"]);
    // The third slot of three, then none: the slots decide as ever.
    assert_eq!((take("3").await, take("4").await), (OK, OVER));
    assert_eq!(s.status(), "ready");
    assert_eq!(trips(&s), 0.0);
    let m = s.get("/metrics").1;
    assert_eq!(
        metric(&m, "sluice_store_errors_total{kind=\"error\"}"),
        Some(0.0)
    );
}
