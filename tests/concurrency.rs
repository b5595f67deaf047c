//! Concurrency limits (`algorithm: concurrency`) against the real binary:
//! at most `max_in_flight` slots per counter, shared by every instance on one
//! store, each given back by its release (`is_negative_hits`) or, when the
//! release never comes, by its lease.

mod common;

use std::time::Duration;

use common::memcache::Memcached;
use common::redis::{RedisCluster, RedisServer};
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<Channel>;

const RULES: &str = "
domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max_in_flight: 3, lease: 3s}
";

fn start(extra: &[&str]) -> Sluice {
    let s = Sluice::start(&[("llm.yaml", RULES)], extra);
    assert!(
        eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
        "{:?}",
        s.readyz()
    );
    s
}

/// Takes (or with `release`, gives back) the slot `id` of `key`; `hits` 0 looks.
async fn slot(c: &mut Client, key: &str, id: &str, hits: u64, release: bool) -> RateLimitResponse {
    let mut d = descriptor(&[("api_key", key), ("request_id", id)]);
    d.hits_addend = Some(UInt64Value { value: hits });
    d.is_negative_hits = release;
    c.should_rate_limit(request("llm", vec![d]))
        .await
        .expect("rpc")
        .into_inner()
}

async fn take(c: &mut Client, key: &str, id: &str) -> i32 {
    slot(c, key, id, 1, false).await.overall_code
}

/// The whole life of slots on one store, through two clients (two instances
/// when the store is shared).
async fn lifecycle(a: &mut Client, b: &mut Client, key: &str) {
    for id in ["r1", "r2", "r3"] {
        assert_eq!(take(a, key, id).await, OK, "{key} {id}");
    }
    assert_eq!(take(b, key, "r4").await, OVER, "{key}: three in flight");
    // At exactly the limit, a look passes; it takes nothing.
    assert_eq!(slot(b, key, "r4", 0, false).await.overall_code, OK);
    // The same request again renews its slot, never takes a second one.
    assert_eq!(take(a, key, "r1").await, OK);
    // A release frees the slot at once, on any instance.
    assert_eq!(slot(b, key, "r2", 1, true).await.overall_code, OK);
    assert_eq!(take(b, key, "r4").await, OK, "{key}: r2 gave its slot back");
    assert_eq!(take(a, key, "r5").await, OVER);
    // A release of a slot never held (or already gone) does nothing.
    slot(a, key, "ghost", 1, true).await;
    slot(a, key, "r2", 1, true).await;
    assert_eq!(take(a, key, "r5").await, OVER, "{key}: nothing freed");
    // Releases that never come: every slot is back once its lease ends.
    assert!(
        eventually(Duration::from_secs(10), || {
            let (mut a, key) = (a.clone(), key.to_owned());
            futures_block(async move {
                let look = slot(&mut a, &key, "look", 0, false).await;
                look.statuses
                    .first()
                    .is_some_and(|s| s.limit_remaining == 3)
            })
        }),
        "{key}: the leases never ended"
    );
    for id in ["n1", "n2", "n3"] {
        assert_eq!(take(b, key, id).await, OK, "{key} {id}");
    }
    assert_eq!(take(a, key, "n4").await, OVER, "{key}: n1, n2, n3");
}

/// Runs a future to completion from a synchronous poll loop.
fn futures_block<F: std::future::Future<Output = bool> + Send + 'static>(f: F) -> bool {
    let handle = tokio::runtime::Handle::current();
    std::thread::scope(|s| s.spawn(|| handle.block_on(f)).join().unwrap_or(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_in_flight_on_every_store() {
    let memory = start(&[]);
    let mut c = memory.client().await;
    lifecycle(&mut c.clone(), &mut c, "memory").await;

    let redis = RedisServer::start();
    let args = ["--redis-url", &redis.url(), "--redis-timeout", "2s"];
    let (one, two) = (start(&args), start(&args));
    lifecycle(&mut one.client().await, &mut two.client().await, "redis").await;

    let cluster = RedisCluster::start();
    let args = ["--redis-cluster", &cluster.seeds(), "--redis-timeout", "2s"];
    let (one, two) = (start(&args), start(&args));
    lifecycle(&mut one.client().await, &mut two.client().await, "cluster").await;

    // Acquires and releases count as hits and refunds of the rule.
    let text = memory.get("/metrics").1;
    let rule = "{domain=\"llm\",rule=\"api_key.request_id\"}";
    assert!(
        metric(&text, &format!("sluice_rule_refunded_hits_total{rule}")).unwrap_or(0.0) >= 3.0,
        "{text}"
    );
}

/// memcached has no set to hold leases in: a concurrency rule is refused
/// when the rules load, in words, rather than counted per instance.
#[test]
fn memcached_refuses_a_concurrency_rule_at_load() {
    let mc = Memcached::start();
    let dir = config_dir(&[("llm.yaml", RULES)]);
    let out = std::process::Command::new(sluice_bin())
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .args(["--memcache-servers", &mc.addr(), "--config"])
        .arg(dir.path())
        .output()
        .expect("sluice");
    assert!(!out.status.success());
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("algorithm: concurrency needs Redis or memory: memcached holds no leases"),
        "{said}"
    );
    assert!(said.contains("llm.yaml"), "{said}");
}
