//! Refunds (`is_negative_hits`) against the real binary on every store and
//! every shape: hits given back are spendable again, a counter never goes
//! below empty and a refund never makes one, a refund is never OVER_LIMIT
//! and never a hit in the metrics, and no instance keeps refusing from its
//! local over-limit cache once a refund brought the counter back under; on
//! a sentinel, on the fallback and in shadow mode as well.

mod common;

use std::time::Duration;

use common::memcache::Memcached;
use common::redis::{RedisCluster, RedisSentinel, RedisServer, free_port};
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::transport::Channel;

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<Channel>;

const RULES: &str = "
domain: usage
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 10, refundable: true}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window, refundable: true}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 10}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10, refundable: true}
";

const SHAPES: [&str; 3] = ["fixed", "sliding", "bucket"];

fn start(extra: &[&str]) -> Sluice {
    let s = Sluice::start(&[("usage.yaml", RULES)], extra);
    assert!(
        eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
        "{:?}",
        s.readyz()
    );
    s
}

/// No rule has this key: a descriptor of it is counted by Envoy's
/// per-request `limit` override, 10 an hour.
const OVERRIDE: &str = "override";

/// `hits` spent (or given back, `refund`) on `key=value`.
async fn send(
    c: &mut Client,
    key: &str,
    value: &str,
    hits: u64,
    refund: bool,
) -> RateLimitResponse {
    let mut d = if key == OVERRIDE {
        let hour = envoy_types::pb::envoy::r#type::v3::RateLimitUnit::Hour as i32;
        descriptor_with_limit(&[(key, value)], 10, hour)
    } else {
        descriptor(&[(key, value)])
    };
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
    d.is_negative_hits = refund;
    c.should_rate_limit(request("usage", vec![d]))
        .await
        .expect("rpc")
        .into_inner()
}

/// How many of `n` one-hit requests on `key=value` are admitted.
async fn spend(c: &mut Client, key: &str, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(send(c, key, value, 1, false).await.overall_code == OK);
    }
    ok
}

/// Every shape on one store: spend the limit, give 5 back, spend them again;
/// a refund larger than what was spent floors at empty; a refund of a
/// counter that is not there makes no credit.
async fn every_shape(c: &mut Client, tag: &str) {
    for shape in SHAPES {
        let v = format!("{tag}-a");
        // Exactly the limit: a window counts refused hits too, as the
        // reference does, and those would need giving back as well.
        assert_eq!(spend(c, shape, &v, 10).await, 10, "{tag} {shape}");
        let at = send(c, shape, &v, 0, false).await.overall_code;
        assert_eq!(at, OK, "{tag} {shape}: at the limit, a check passes");
        assert_eq!(spend(c, shape, &v, 1).await, 0, "{tag} {shape}: the limit");
        let r = send(c, shape, &v, 5, true).await;
        assert_eq!(r.overall_code, OK, "{tag} {shape}: a refund is never over");
        // A window counted the refused hit, a bucket did not take it.
        let back = if shape == "bucket" { 5 } else { 4 };
        assert_eq!(
            spend(c, shape, &v, 6).await,
            back,
            "{tag} {shape}: given back"
        );

        let v = format!("{tag}-b");
        assert_eq!(spend(c, shape, &v, 2).await, 2);
        send(c, shape, &v, 50, true).await;
        assert_eq!(
            spend(c, shape, &v, 12).await,
            10,
            "{tag} {shape}: floored at empty"
        );

        let v = format!("{tag}-c");
        send(c, shape, &v, 50, true).await;
        assert_eq!(
            spend(c, shape, &v, 12).await,
            10,
            "{tag} {shape}: no credit made"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_give_hits_back_on_every_store_and_shape() {
    let memory = start(&[]);
    every_shape(&mut memory.client().await, "memory").await;

    let redis = RedisServer::start();
    let on_redis = start(&["--redis-url", &redis.url(), "--redis-timeout", "2s"]);
    every_shape(&mut on_redis.client().await, "redis").await;
    // A refund of a counter that was never there creates no key.
    send(&mut on_redis.client().await, "fixed", "never", 5, true).await;
    let keys = redis.counter_keys();
    assert!(!keys.iter().any(|k| k.contains("never")), "{keys:?}");

    let cluster = RedisCluster::start();
    let on_cluster = start(&["--redis-cluster", &cluster.seeds(), "--redis-timeout", "2s"]);
    every_shape(&mut on_cluster.client().await, "cluster").await;

    let mc = Memcached::start();
    let addr = mc.addr();
    let on_memcache = start(&["--memcache-servers", &addr, "--redis-timeout", "2s"]);
    every_shape(&mut on_memcache.client().await, "memcache").await;

    // Refunds have their own counter; hits and over-limit count only spends.
    let text = memory.get("/metrics").1;
    let series = |name: &str| {
        metric(&text, &format!("{name}{{domain=\"usage\",rule=\"fixed\"}}")).unwrap_or(-1.0)
    };
    assert_eq!(series("sluice_rule_refunded_hits_total"), 105.0, "{text}");
    assert_eq!(series("sluice_rule_total_hits_total"), 43.0, "{text}");
    assert_eq!(series("sluice_rule_over_limit_total"), 7.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_instance_refuses_from_its_cache_after_a_refund() {
    let redis = RedisServer::start();
    let args = [
        "--redis-url",
        &redis.url(),
        "--redis-timeout",
        "2s",
        "--refundable-overrides",
    ];
    let a = start(&args);
    let b = start(&args);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for key in ["fixed", OVERRIDE, "plain"] {
        // Over the limit on a: a flood on a plain rule is answered from a's
        // cache (the case the cache exists for).
        assert_eq!(spend(&mut ca, key, "k", 13).await, 10, "{key}");
        // A refund through b brings the shared counter back under.
        let before =
            metric(&a.get("/metrics").1, "sluice_store_local_cache_hits_total").unwrap_or(0.0);
        send(&mut cb, key, "k", 5, true).await;
        let admitted = spend(&mut ca, key, "k", 1).await;
        let after =
            metric(&a.get("/metrics").1, "sluice_store_local_cache_hits_total").unwrap_or(0.0);
        if key != "plain" {
            // Refundable (a rule's mark, or --refundable-overrides): a
            // never cached it, so its very next request sees the refund.
            assert_eq!(admitted, 1, "a refundable rule is never cached");
            assert_eq!(before, after, "nothing answered from the cache");
        } else {
            // Not marked: a answers from its memory, as it must for floods,
            // but trusts a refusal for half a second only: every request
            // that reaches it later than that after the refund is decided
            // by the store, and admitted.
            let refunded = std::time::Instant::now();
            let mut admitted = admitted;
            while admitted == 0 {
                let sent = refunded.elapsed();
                admitted = spend(&mut ca, key, "k", 1).await;
                assert!(
                    admitted == 1 || sent < Duration::from_millis(500),
                    "{key}: refused from the cache {sent:?} after the refund"
                );
            }
            // Over again (11 counted before the cache answered, 5 given
            // back, 1 spent: 3 admitted of 4), and cached; a refund through
            // a itself: a forgets at once.
            assert_eq!(spend(&mut ca, key, "k", 4).await, 3, "{key}: over again");
            send(&mut ca, key, "k", 3, true).await;
            assert_eq!(spend(&mut ca, key, "k", 1).await, 1, "a forgot its entry");
        }
    }
}

/// The stores and modes the first test leaves out: Redis behind a sentinel,
/// the memory fallback a dead Redis leaves, and a shadow-mode rule, whose
/// refunds move the counter its would-be refusals are counted from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_on_a_sentinel_through_the_fallback_and_in_shadow_mode() {
    let master = RedisServer::start();
    let sentinel = RedisSentinel::start("mymaster", master.port);
    let spec = format!("mymaster@127.0.0.1:{}", sentinel.port);
    let on_sentinel = start(&["--redis-sentinel", &spec, "--redis-timeout", "2s"]);
    every_shape(&mut on_sentinel.client().await, "sentinel").await;

    // Nothing listens on this port: every call fails and the fallback counts.
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let s = Sluice::start(
        &[("usage.yaml", RULES)],
        &["--redis-url", &dead, "--store-failure", "fallback"],
    );
    let mut c = s.client().await;
    assert_eq!(spend(&mut c, "fixed", "fb", 10).await, 10);
    assert_eq!(spend(&mut c, "fixed", "fb", 1).await, 0);
    send(&mut c, "fixed", "fb", 5, true).await;
    assert_eq!(
        spend(&mut c, "fixed", "fb", 6).await,
        4,
        "given back on the fallback"
    );
    assert!(
        s.readyz().to_string().contains("fallback"),
        "{:?}",
        s.readyz()
    );

    // Shadow mode: everything passes; refusals it would have made are counted.
    let memory = start(&[]);
    let mut c = memory.client().await;
    let shadowed = |m: &Sluice| {
        metric(
            &m.get("/metrics").1,
            "sluice_rule_shadow_mode_total{domain=\"usage\",rule=\"shadow\"}",
        )
        .unwrap_or(0.0)
    };
    assert_eq!(spend(&mut c, "shadow", "k", 11).await, 11);
    assert_eq!(shadowed(&memory), 1.0);
    // 11 counted, 5 given back: 4 more pass unremarked, the fifth would not.
    send(&mut c, "shadow", "k", 5, true).await;
    assert_eq!(spend(&mut c, "shadow", "k", 4).await, 4);
    assert_eq!(
        shadowed(&memory),
        1.0,
        "a refund made room in shadow mode too"
    );
    assert_eq!(spend(&mut c, "shadow", "k", 1).await, 1);
    assert_eq!(shadowed(&memory), 2.0);
}
