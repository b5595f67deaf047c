//! Redis and Redis Cluster counters, on real redis-server processes: shared
//! counts, exactness, key format and expiry, the local over-limit cache, and
//! outages (killed, stopped, restarted) that never stall an answer.

#[path = "redis/cluster.rs"]
mod cluster;
mod common;
#[path = "redis/credentials.rs"]
mod credentials;
#[path = "redis/keys.rs"]
mod keys;
#[path = "redis/outages.rs"]
mod outages;

use std::time::Duration;

use common::redis::{DelayProxy, RedisServer};
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: email
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: a
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: c
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: d
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
";

/// Envoy's filter gives each call a deadline; a store outage must never make
/// sluice miss it. This is the deadline these tests give (generous on purpose:
/// latency itself is measured by `make bench`, not asserted here).
const DEADLINE: Duration = Duration::from_millis(500);

fn start(redis_args: &[&str]) -> Sluice {
    Sluice::start(&[("shop.yaml", RULES)], redis_args)
}

fn ready(s: &Sluice) -> bool {
    s.get("/readyz").1.contains("\"status\":\"ready\"")
}

fn wait_ready(s: &Sluice) {
    assert!(
        eventually(Duration::from_secs(10), || ready(s)),
        "never ready: {}",
        s.get("/readyz").1
    );
}

/// An answer within [`DEADLINE`]. A request sluice shed because it ran late
/// itself (a loaded test machine starving it past a short `--redis-timeout`)
/// is a prompt answer too, but not the one these tests look at: it is asked
/// again, each time within the deadline.
async fn ask_within(
    c: &mut RateLimitServiceClient<Channel>,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    past_sheds(c, || {
        let mut req = tonic::Request::new(request("shop", vec![descriptor(entries)]));
        req.set_timeout(DEADLINE);
        req
    })
    .await
    .unwrap_or_else(|s| panic!("an answer within the deadline: {s:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_exact_budget() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--redis-url", url.as_str(), "--redis-timeout", "2s"];
    let (one, two) = (start(&args), start(&args));
    wait_ready(&one);
    wait_ready(&two);
    let clients = [one.client().await, two.client().await];
    let admitted = admitted(&clients, 200, "shop", ("hot", "k")).await;
    assert_eq!(
        admitted, 100,
        "200 concurrent clients on two instances, limit 100"
    );
    // And the count is shared: the other instance sees it spent.
    let mut c = two.client().await;
    assert_eq!(
        ask(&mut c, "shop", &[("hot", "k")]).await.overall_code,
        OVER
    );
}

/// Requests that queue for Redis together and hit one counter share one
/// increment, and each still gets the count it would have got alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_costs_redis_one_increment_per_batch_and_counts_stay_exact() {
    let redis = RedisServer::start();
    // A slow link and one connection make requests queue into batches.
    let proxy = DelayProxy::start(redis.port);
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let s = start(&[
        "--redis-url",
        &url,
        "--redis-timeout",
        "5s",
        "--redis-pool-size",
        "1",
    ]);
    wait_ready(&s);
    proxy.set_delay(20);
    let client = s.client().await;
    let before = redis.calls("incrby");
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move { ask(&mut c, "shop", &[("hot", "k")]).await })
        })
        .collect();
    let mut remaining = Vec::new();
    for t in tasks {
        let r = t.await.expect("task");
        if r.overall_code == OK {
            remaining.push(r.statuses[0].limit_remaining);
        }
    }
    remaining.sort_unstable();
    // Exactly the limit admitted, each with its own place in the count.
    assert_eq!(remaining, (0..100).collect::<Vec<u32>>());
    let increments = redis.calls("incrby") - before;
    assert!(
        increments < 50,
        "200 requests on one key cost {increments} INCRBY calls"
    );
}

/// A bot flooding a shadow-mode rule is answered from the over-limit cache
/// as an enforced rule's is (the reference's
/// `TestOverLimitWithLocalCacheShadowRule`), yet the store still counts its
/// whole demand, which is the usage the advisor reads.
#[tokio::test]
async fn a_flooded_shadow_rule_is_answered_from_the_cache_and_still_counted() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    wait_ready(&s);
    let mut c = s.client().await;
    let before = redis.calls("incrby") + redis.calls("evalsha") + redis.calls("eval");
    for _ in 0..300 {
        assert_eq!(
            ask(&mut c, "shop", &[("shadowed", "bot")])
                .await
                .overall_code,
            OK
        );
    }
    let calls = redis.calls("incrby") + redis.calls("evalsha") + redis.calls("eval") - before;
    assert!(
        calls < 100,
        "300 requests on a flooded shadow rule cost {calls} store calls"
    );
    let cached = metric(&s.get("/metrics").1, "sluice_store_local_cache_hits_total").unwrap_or(0.0);
    assert!(cached >= 200.0, "{cached} answered from the cache");
    // Every hit reaches the store's count, within a moment.
    let count = || {
        let keys = redis.counter_keys();
        keys.first()
            .map(|k| redis.cli(&["get", k]).trim().to_owned())
    };
    assert!(
        eventually(Duration::from_secs(5), || count().as_deref() == Some("300")),
        "the store holds {:?} of 300 hits",
        count()
    );
}

#[tokio::test]
async fn over_limit_keys_stop_costing_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    wait_ready(&s);
    let mut c = s.client().await;
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, "shop", &[("ip", "flood")]).await.overall_code,
            OK
        );
    }
    assert_eq!(
        ask(&mut c, "shop", &[("ip", "flood")]).await.overall_code,
        OVER
    );
    let before = redis.calls("evalsha") + redis.calls("eval");
    for _ in 0..50 {
        assert_eq!(
            ask(&mut c, "shop", &[("ip", "flood")]).await.overall_code,
            OVER
        );
    }
    assert_eq!(
        redis.calls("evalsha") + redis.calls("eval"),
        before,
        "cached over-limit keys cost Redis nothing"
    );
    let (_, m) = s.get("/metrics");
    assert_eq!(
        metric(&m, "sluice_store_local_cache_hits_total"),
        Some(50.0)
    );

    // A per-request override that allows more is not blocked by the cache.
    let d = descriptor_with_limit(&[("ip", "flood")], 100, 3);
    let r = c
        .should_rate_limit(request("shop", vec![d]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(redis.calls("evalsha") + redis.calls("eval"), before + 1);
}

/// A freshly started instance asks the store it has not dialled yet rather
/// than deciding by the failure policy: its first request on a counter the
/// store holds at its limit is refused. Before, the first requests after a
/// start (an instance restarted in a fleet) were decided by the fallback's
/// empty memory and admitted past the fleet's count.
#[tokio::test]
async fn a_started_instance_counts_in_the_store_from_its_first_request() {
    let redis = RedisServer::start();
    let url = redis.url();
    let rules = "domain: fleet\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
    let minute = utc("") / 60 * 60;
    for w in [minute, minute + 60] {
        redis.cli(&["set", &format!("fleet_user_spent_{w}"), "3", "EX", "200"]);
    }
    for _ in 0..3 {
        let s = Sluice::start(
            &[("fleet.yaml", rules)],
            &[
                "--redis-url",
                &url,
                "--key-format",
                "envoyproxy",
                "--redis-timeout",
                "2s",
            ],
        );
        let mut c = s.client().await;
        let first = ask(&mut c, "fleet", &[("user", "spent")]).await;
        assert_eq!(
            first.overall_code, OVER,
            "the store's count decides the first request"
        );
    }
}

/// `date -u` with `args`, as seconds since the epoch.
fn utc(args: &str) -> u64 {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("date -u {args} +%s")])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("seconds")
}
