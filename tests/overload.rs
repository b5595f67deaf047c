//! Overload against a real redis-server: sluice sheds what it cannot ask
//! the store in time (never onto the per-instance fallback, never tripping
//! the breaker), keeps deny routes closed while shedding, and drops work
//! whose caller has gone before it reaches Redis.

mod common;

use std::time::Duration;

use common::redis::{DelayProxy, RedisServer};
use common::*;
use futures_util::future::join_all;

const RULES: &str = "
domain: web
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 1000000, on_store_failure: deny}
";

/// Redis behind a delay proxy, and a sluice counting there (a store
/// timeout of 2 s, so only the caller's patience or a bound decides), ready.
fn behind_a_slow_link(extra: &[&str]) -> (RedisServer, DelayProxy, Sluice) {
    let redis = RedisServer::start();
    let proxy = DelayProxy::start(redis.port);
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let mut args = vec!["--redis-url", &url, "--redis-timeout", "2s"];
    args.extend_from_slice(extra);
    let s = Sluice::start(&[("web.yaml", RULES)], &args);
    assert!(eventually(Duration::from_secs(10), || s.readyz()["store"]
        ["healthy"]
        == true));
    (redis, proxy, s)
}

fn redis_total(redis: &RedisServer) -> u64 {
    redis
        .counter_keys()
        .iter()
        .map(|k| redis.cli(&["GET", k]).trim().parse::<u64>().unwrap_or(0))
        .sum()
}

/// 64 concurrent requests on one connection, `--max-pending 4`, Redis
/// behind a 50 ms link: the excess is shed at once (UNAVAILABLE, or
/// OVER_LIMIT for the rule that denies on store failure), Redis counts
/// exactly the admitted ones, nothing lands in the memory fallback, and the
/// breaker never opens.
#[tokio::test]
async fn past_max_pending_requests_are_shed_never_counted_per_instance() {
    let (redis, proxy, s) = behind_a_slow_link(&["--max-pending", "4"]);
    let mut c = s.client().await;
    proxy.set_delay(50);
    for key in ["open", "closed"] {
        let calls = (0..64).map(|_| {
            let mut c = c.clone();
            async move {
                c.should_rate_limit(request("web", vec![descriptor(&[(key, "x")])]))
                    .await
            }
        });
        let answers = join_all(calls).await;
        let ok = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(|r| r.get_ref().overall_code == OK))
            .count();
        let over = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(|r| r.get_ref().overall_code == OVER))
            .count();
        let unavailable = answers
            .iter()
            .filter(|a| {
                a.as_ref()
                    .is_err_and(|e| e.code() == tonic::Code::Unavailable)
            })
            .count();
        assert!((4..64).contains(&ok), "{key}: {ok} admitted");
        if key == "open" {
            assert_eq!(ok + unavailable, 64, "{key}: {answers:?}");
        } else {
            assert_eq!(ok + over, 64, "deny stays closed when shed: {answers:?}");
        }
    }
    proxy.set_delay(0);
    let m = s.get("/metrics").1;
    let admitted = metric(&m, "sluice_requests_total{code=\"ok\"}").unwrap();
    assert_eq!(
        redis_total(&redis) as f64,
        admitted,
        "Redis counted every admit"
    );
    assert!(metric(&m, "sluice_bound_hits_total{bound=\"shed\"}").unwrap() >= 64.0);
    assert_eq!(metric(&m, "sluice_store_circuit_trips_total"), Some(0.0));
    assert_eq!(metric(&m, "sluice_memory_counters"), Some(0.0));
    assert_eq!(
        metric(
            &m,
            "sluice_store_policy_decisions_total{policy=\"fallback\"}"
        )
        .unwrap_or(0.0),
        0.0
    );
    assert_eq!(ask(&mut c, "web", &[("open", "y")]).await.overall_code, OK);
}

/// Callers that give up after 20 ms (they reset their streams), against a
/// Redis link of 80 ms and one connection: those that left while the first
/// call was in flight are never sent to Redis, and each is counted as
/// abandoned. (With a `grpc-timeout`, sluice answers by the deadline
/// instead: the store slower than the caller is a store failure.)
///
/// Spread over 8 connections, as an Envoy's workers spread theirs: on one,
/// more than 20 resets of streams sluice had not yet accepted tripped the
/// rapid-reset guard at h2's default (`--grpc-max-pending-resets` was 20)
/// with GOAWAY `ENHANCE_YOUR_CALM`, and its calls then ended neither
/// answered nor abandoned (2 runs in 25).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_whose_caller_has_gone_never_reaches_redis() {
    let (redis, proxy, s) = behind_a_slow_link(&["--redis-pool-size", "1"]);
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(s.client().await);
    }
    proxy.set_delay(80);
    let calls = (0..200).map(|i| {
        let mut c = clients[i as usize % clients.len()].clone();
        async move {
            // A little spread, as Envoy's requests arrive.
            tokio::time::sleep(Duration::from_millis(i % 100)).await;
            let req = request("web", vec![descriptor(&[("open", "z")])]);
            tokio::time::timeout(Duration::from_millis(20), c.should_rate_limit(req)).await
        }
    });
    let answers = join_all(calls).await;
    let gone = answers.iter().filter(|a| a.is_err()).count();
    assert!(gone >= 150, "{gone} of 200 gave up");
    let counted = eventually(Duration::from_secs(5), || {
        bound(&s, "abandoned") + 5.0 >= gone as f64
    });
    let early: Vec<String> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .map(|a| match a {
            Ok(r) => format!("{:?}", r.get_ref().overall_code),
            Err(e) => format!("{:?} {}", e.code(), e.message()),
        })
        .collect();
    assert!(
        counted,
        "{gone} gave up, {} counted abandoned, Redis saw {}; answered: {early:?}; GOAWAY for resets: {}",
        bound(&s, "abandoned"),
        redis_total(&redis),
        s.logs_contain("pending-accept streams reached limit")
    );
    // Let the call in flight land, then count what Redis saw.
    proxy.set_delay(0);
    std::thread::sleep(Duration::from_millis(500));
    let seen = redis_total(&redis);
    assert!(seen < 100, "Redis counted {seen} of 200 abandoned requests");
    let m = s.get("/metrics").1;
    assert_eq!(metric(&m, "sluice_store_circuit_trips_total"), Some(0.0));
}
