//! Redis and Redis Cluster counters, on real redis-server processes: shared
//! counts, exactness, key format and expiry, the local over-limit cache, and
//! outages (killed, stopped, restarted) that never stall an answer.

mod common;

use std::time::Duration;

use common::redis::{DelayProxy, RedisCluster, RedisServer, free_port};
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

#[tokio::test]
async fn keys_carry_prefix_format_and_a_bounded_expiry() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&[
        "--redis-url",
        &url,
        "--cache-key-prefix",
        "pfx:",
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&s);
    let mut c = s.client().await;
    ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await;
    let keys = redis.counter_keys().join("\n");
    let key = keys.trim();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start_of_hour = now / 3600 * 3600;
    assert!(
        key == format!("pfx:shop_ip_1.2.3.4_{start_of_hour}")
            || key == format!("pfx:shop_ip_1.2.3.4_{}", start_of_hour - 3600),
        "{key}"
    );
    assert_eq!(redis.cli(&["get", key]).trim(), "1");
    let ttl: u64 = redis.cli(&["ttl", key]).trim().parse().unwrap();
    assert!(
        (1..=3600 + 5).contains(&ttl),
        "ttl {ttl} outlives the window"
    );

    let sluice_format = start(&[
        "--redis-url",
        &url,
        "--cache-key-prefix",
        "sl:",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&sluice_format);
    let mut c = sluice_format.client().await;
    ask(&mut c, "shop", &[("email", "someone@example.com")]).await;
    let keys = redis.cli(&["--scan", "--pattern", "sl:shop:*"]);
    let key = keys.trim();
    assert!(key.starts_with("sl:shop:HOUR:"), "{key}");
    assert!(
        !keys.contains("example.com"),
        "no email in clear in Redis keys: {keys}"
    );
    assert_eq!(key.rsplit(':').next().unwrap().len(), 32);
    let ttl: i64 = redis.cli(&["ttl", key]).trim().parse().unwrap();
    assert!((1..=3600 + 5).contains(&ttl), "ttl {ttl}");
    assert!(
        !sluice_format
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("example.com")),
        "no email in logs"
    );
}

/// A migration fleet shares the reference's keys: what a reference instance
/// reads there must be the hits, never a leased chunk counted ahead of them
/// (the reference's `TestGenerateCacheKeysWithShareThreshold`). With the
/// shipped defaults (leasing on) and `--key-format envoyproxy`.
#[tokio::test]
async fn a_reference_key_holds_exactly_the_hits() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&[
        "--redis-url",
        &url,
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&s);
    let mut c = s.client().await;
    for n in 1..=6u32 {
        assert_eq!(
            ask(&mut c, "shop", &[("hot", "mig")]).await.overall_code,
            OK
        );
        let keys = redis.counter_keys().join("\n");
        let key = keys.trim();
        assert!(key.starts_with("shop_hot_mig_"), "{key}");
        assert_eq!(
            redis.cli(&["get", key]).trim(),
            n.to_string(),
            "after {n} requests the reference's key must hold {n}"
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_never_stalls_answers_and_comes_back() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let s = start(&["--redis-url", &url, "--redis-timeout", "20ms"]);
    wait_ready(&s);
    let mut c = s.client().await;
    assert_eq!(
        ask_within(&mut c, &[("ip", "before")]).await.overall_code,
        OK
    );

    redis.kill();
    // Every request is answered within the deadline; the fallback policy keeps
    // limits enforced in this instance.
    let codes: Vec<i32> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(ask_within(&mut c, &[("ip", "during")]).await.overall_code);
        }
        v
    };
    assert_eq!(codes, [OK, OK, OK, OVER]);
    for _ in 0..100 {
        ask_within(&mut c, &[("hot", "x")]).await;
    }
    let (code, text) = s.get("/readyz");
    assert_eq!(code, 200, "a degraded limiter stays in rotation");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "degraded");
    assert_eq!(v["store"]["backend"], "redis");
    assert_eq!(v["store"]["in_use"], "memory-fallback");
    assert!(
        v["store"]["detail"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{text}"
    );
    let (_, m) = s.get("/metrics");
    assert_eq!(metric(&m, "sluice_store_circuit_open"), Some(1.0));
    assert!(
        metric(
            &m,
            "sluice_store_policy_decisions_total{policy=\"fallback\"}"
        )
        .unwrap()
            >= 100.0
    );
    assert!(metric(&m, "sluice_store_errors_total{kind=\"error\"}").unwrap() >= 1.0);
    let downs = s
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("store down"))
        .count();
    assert_eq!(downs, 1, "one log line when the store goes down");

    redis.restart();
    assert!(
        eventually(Duration::from_secs(10), || ready(&s)),
        "sluice did not return to Redis"
    );
    assert!(eventually(Duration::from_secs(2), || s.logs_contain("store back")));
    assert_eq!(
        ask_within(&mut c, &[("ip", "after")]).await.overall_code,
        OK
    );
    assert!(!redis.counter_keys().is_empty(), "counting in Redis again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_timeout_not_a_stall() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&["--redis-url", &url, "--redis-timeout", "20ms"]);
    wait_ready(&s);
    let mut c = s.client().await;
    redis.signal("STOP");
    for _ in 0..30 {
        ask_within(&mut c, &[("ip", "hang")]).await;
    }
    assert!(s.get("/readyz").1.contains("\"status\":\"degraded\""));
    let (_, m) = s.get("/metrics");
    assert!(metric(&m, "sluice_store_errors_total{kind=\"timeout\"}").unwrap() >= 5.0);
    redis.signal("CONT");
    assert!(
        eventually(Duration::from_secs(10), || ready(&s)),
        "sluice did not return after SIGCONT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_stays_down_until_it_answers_in_time() {
    let redis = RedisServer::start();
    let proxy = DelayProxy::start(redis.port);
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let s = start(&["--redis-url", &url, "--redis-timeout", "50ms"]);
    wait_ready(&s);
    let mut c = s.client().await;
    proxy.set_delay(300);
    // Slower than the timeout: every request still answered, by the policy.
    for i in 0..40 {
        ask_within(&mut c, &[("ip", &format!("slow-{i}"))]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s.get("/readyz").1.contains("\"status\":\"degraded\""));
    // It answers PING, but too late: sluice must not keep taking it back.
    assert!(
        !s.logs_contain("store back"),
        "a Redis slower than --redis-timeout was declared back"
    );
    proxy.set_delay(0);
    assert!(
        eventually(Duration::from_secs(10), || ready(&s)),
        "sluice did not return once Redis was fast again"
    );
    ask_within(&mut c, &[("ip", "after-slow")]).await;
    assert!(!redis.counter_keys().is_empty(), "counting in Redis again");
}

#[tokio::test]
async fn startup_with_redis_down_serves_by_policy() {
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let allow = start(&["--redis-url", &dead, "--store-failure", "allow"]);
    let mut c = allow.client().await;
    for _ in 0..5 {
        assert_eq!(
            ask_within(&mut c, &[("ip", "x")]).await.overall_code,
            OK,
            "allow admits past the limit"
        );
    }
    assert!(allow.get("/readyz").1.contains("\"in_use\":\"allow-all\""));
    assert!(eventually(Duration::from_secs(5), || allow
        .logs_contain("store unreachable at startup")));

    let deny = start(&["--redis-url", &dead, "--store-failure", "deny"]);
    let mut c = deny.client().await;
    let r = ask_within(&mut c, &[("ip", "x")]).await;
    assert_eq!(r.overall_code, OVER, "deny answers over limit");
    assert!(retry_after(&r).is_some());

    let fallback = start(&["--redis-url", &dead]);
    let mut c = fallback.client().await;
    let codes: Vec<i32> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(ask_within(&mut c, &[("ip", "x")]).await.overall_code);
        }
        v
    };
    assert_eq!(
        codes,
        [OK, OK, OK, OVER],
        "fallback keeps limits per instance"
    );
}

#[tokio::test]
async fn tls_and_acl_credentials() {
    let redis = RedisServer::start_tls();
    // A self-signed test certificate: `#insecure` skips verification.
    let url = format!("rediss://app:pw@127.0.0.1:{}/#insecure", redis.port);
    let s = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    wait_ready(&s);
    let mut c = s.client().await;
    for _ in 0..3 {
        assert_eq!(ask(&mut c, "shop", &[("ip", "tls")]).await.overall_code, OK);
    }
    assert_eq!(
        ask(&mut c, "shop", &[("ip", "tls")]).await.overall_code,
        OVER
    );
    assert!(
        !s.logs.lock().unwrap().iter().any(|l| l.contains("app:pw")),
        "password masked"
    );

    let wrong = start(&[
        "--redis-url",
        &format!("rediss://app:nope@127.0.0.1:{}/#insecure", redis.port),
    ]);
    assert!(eventually(Duration::from_secs(5), || wrong
        .logs_contain("store unreachable at startup")));
    assert!(wrong.get("/readyz").1.contains("\"status\":\"degraded\""));

    // Verified against a private CA, no `#insecure`.
    let verified = format!("rediss://app:pw@127.0.0.1:{}/", redis.port);
    let ca = redis.dir().join("ca.pem").display().to_string();
    let s = start(&[
        "--redis-url",
        &verified,
        "--redis-timeout",
        "2s",
        "--redis-tls-ca",
        &ca,
    ]);
    wait_ready(&s);
    let untrusted = start(&["--redis-url", &verified, "--redis-timeout", "2s"]);
    assert!(eventually(Duration::from_secs(5), || untrusted
        .logs_contain("store unreachable at startup")));
}

#[test]
fn credentials_never_reach_the_logs() {
    let s = start(&[
        "--redis-url",
        &format!("redis://app:s3cret-pw@127.0.0.1:{}", free_port()),
    ]);
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("store unreachable at startup")));
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("app:***@")));
    assert!(
        !s.logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("s3cret-pw"))
    );
    assert!(!s.get("/readyz").1.contains("s3cret-pw"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_counts_requests_spanning_slots() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds();
    let s = start(&["--redis-cluster", &seeds, "--redis-timeout", "2s"]);
    wait_ready(&s);
    let mut c = s.client().await;
    let all = || {
        request(
            "shop",
            ["a", "b", "c", "d"]
                .iter()
                .map(|k| descriptor(&[(k, "v")]))
                .collect(),
        )
    };
    for _ in 0..2 {
        let r = c.should_rate_limit(all()).await.unwrap().into_inner();
        assert_eq!(r.overall_code, OK);
    }
    let r = c.should_rate_limit(all()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OVER);
    assert!(
        r.statuses.iter().all(|s| s.code == OVER),
        "every descriptor counted 3"
    );
    let spread = cluster
        .nodes
        .iter()
        .filter(|n| !n.counter_keys().is_empty())
        .count();
    assert!(spread >= 2, "keys spread over {spread} node(s)");
    let total: u64 = cluster
        .nodes
        .iter()
        .map(|n| n.counter_keys().len() as u64)
        .sum();
    assert_eq!(total, 4);

    // Two instances on the cluster share exactly.
    let two = start(&["--redis-cluster", &seeds, "--redis-timeout", "2s"]);
    wait_ready(&two);
    let clients = [s.client().await, two.client().await];
    let admitted = admitted(&clients, 200, "shop", ("hot", "cluster")).await;
    assert_eq!(admitted, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_failover_is_ridden_out_and_counting_resumes() {
    ride_out_a_failover(Lost::Killed, &[]).await;
}

/// A master stopped for good (a hung host: its connections stay open and
/// answer nothing) while only 4 calls may be in flight
/// (`--redis-cluster-max-in-flight`): calls to it must give their places
/// back, or once they held them all no request could be sent to any node.
/// Counting resumes once its replica takes over. (The Cluster client's
/// own 500 ms response timeout already ends such calls; sluice's 2 s bound
/// on a call is there should that change, so this passes without it too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_stopped_for_good_does_not_hold_every_call() {
    ride_out_a_failover(Lost::Stopped, &["--redis-cluster-max-in-flight", "4"]).await;
}

#[derive(Clone, Copy, PartialEq)]
enum Lost {
    Killed,
    Stopped,
}

/// A master of a Cluster with a replica each is lost (`how`): every
/// request is answered through the failover, and counting resumes in the
/// Cluster, exact.
async fn ride_out_a_failover(how: Lost, flags: &[&str]) {
    let mut cluster = RedisCluster::start_with(1);
    let seeds = cluster.seeds();
    let mut args = vec!["--redis-cluster", &seeds, "--redis-timeout", "200ms"];
    args.extend(flags);
    let s = start(&args);
    wait_ready(&s);
    let mut c = s.client().await;
    assert_eq!(
        ask(&mut c, "shop", &[("a", "before")]).await.overall_code,
        OK
    );
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "three masters");
    let lost = masters[0];
    match how {
        Lost::Killed => cluster.nodes[lost].kill(),
        Lost::Stopped => cluster.nodes[lost].signal("STOP"),
    }
    // The masters among the nodes that answer (a stopped one never does).
    let masters_left = || {
        (0..cluster.nodes.len())
            .filter(|&i| i != lost || how == Lost::Killed)
            .filter(|&i| {
                common::redis::command(cluster.nodes[i].port, "ROLE")
                    .is_some_and(|r| r.contains("master"))
            })
            .count()
    };
    // Through the failover every request is answered (by the fallback while
    // the cluster is short of a master), none fails. A few may be shed when
    // a loaded machine makes sluice itself late (a stressed run did), which
    // is not the store failing: those are allowed, and counted.
    let mut n = 0;
    let mut shed = 0;
    let recovered = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            n += 1;
            let key = format!("during-{n}");
            let r = c
                .should_rate_limit(request(
                    "shop",
                    ["a", "b", "c", "d"]
                        .iter()
                        .map(|k| descriptor(&[(k, &key)]))
                        .collect(),
                ))
                .await;
            if let Err(s) = &r
                && is_shed(s)
                && shed < 10
            {
                shed += 1;
                continue;
            }
            assert!(r.is_ok(), "request {n} failed during failover: {r:?}");
            if ready(&s) && masters_left() == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        recovered.is_ok(),
        "no recovery after {n} requests: {}",
        s.logs
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Counting is in the cluster again, exact: the limit of `a` is 2.
    let key = "after-failover";
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(ask(&mut c, "shop", &[("a", key)]).await.overall_code);
    }
    assert_eq!(codes, [OK, OK, OVER]);
    let stored: u64 = (0..cluster.nodes.len())
        .filter(|&i| i != lost)
        .filter(|&i| cluster.nodes[i].cli(&["role"]).starts_with("master"))
        .map(|i| cluster.nodes[i].counter_keys().len() as u64)
        .sum();
    assert!(stored > 0, "counters live in the cluster again");
    if how == Lost::Stopped {
        cluster.nodes[lost].signal("CONT");
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

/// `--calendar-months` (the reference's `USE_CALENDAR_MONTH_RATE_LIMIT`):
/// under the reference's key format, a month's key carries the first
/// second of the UTC calendar month and expires at its end, and Envoy is
/// told the reset is at the next 1st. Without it, a month is 30 days from
/// the epoch, as the reference's default.
#[tokio::test]
async fn calendar_months_key_and_expire_as_the_references() {
    let redis = RedisServer::start();
    let url = redis.url();
    let rules = "domain: bill\ndescriptors:\n  - key: plan\n    rate_limit: {unit: month, requests_per_unit: 3}\n";
    let base = [
        "--redis-url",
        url.as_str(),
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ];
    let month = utc("-d \"$(date -u +%Y-%m-01)\"");
    let next = utc("-d \"$(date -u +%Y-%m-01) +1 month\"");
    for calendar in [true, false] {
        let mut args = base.to_vec();
        if calendar {
            args.push("--calendar-months");
        }
        let s = Sluice::start(&[("bill.yaml", rules)], &args);
        wait_ready(&s);
        let mut c = s.client().await;
        let value = if calendar { "cal" } else { "thirty" };
        let r = ask(&mut c, "bill", &[("plan", value)]).await;
        let now = utc("");
        let (start, end) = if calendar {
            (month, next)
        } else {
            (
                now / 2_592_000 * 2_592_000,
                now / 2_592_000 * 2_592_000 + 2_592_000,
            )
        };
        let key = format!("bill_plan_{value}_{start}");
        assert_eq!(
            redis.cli(&["get", &key]).trim(),
            "1",
            "{:?}",
            redis.counter_keys()
        );
        let ttl: u64 = redis.cli(&["ttl", &key]).trim().parse().expect("ttl");
        assert!(
            (end - now).saturating_sub(2) <= ttl && ttl <= end - now + 6,
            "calendar={calendar}: expires in {ttl}s, the window ends in {}s",
            end - now
        );
        let reset = r.statuses[0]
            .duration_until_reset
            .as_ref()
            .expect("reset")
            .seconds;
        let reset = u64::try_from(reset).expect("positive");
        assert!(
            (end - now).saturating_sub(2) <= reset && reset <= end - now + 1,
            "calendar={calendar}: reset in {reset}s, the window ends in {}s",
            end - now
        );
    }
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
