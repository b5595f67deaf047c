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
    behind_a_slow_link_within("2s", extra)
}

/// As [`behind_a_slow_link`], with `timeout` for `--redis-timeout`.
fn behind_a_slow_link_within(timeout: &str, extra: &[&str]) -> (RedisServer, DelayProxy, Sluice) {
    let redis = RedisServer::start();
    let proxy = DelayProxy::start(redis.port);
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let mut args = vec!["--redis-url", &url, "--redis-timeout", timeout];
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
    // Leases off: a lease counts its chunk before it is spent (beside two
    // busy loops, 10 counted for 9 admitted); see tests/allowance.rs.
    let (redis, proxy, s) =
        behind_a_slow_link(&["--max-pending", "4", "--leased-allowance", "false"]);
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

/// Callers that give up while their calls wait for the store (they reset
/// their streams): the call already sent is the only one Redis ever sees;
/// every other was queued behind it and is dropped, never sent, and every
/// call sluice had accepted is counted as abandoned.
///
/// Each step waits for what sluice says it holds, never for time: the
/// first call is on the wire (the proxy read it) before the rest are sent,
/// all 200 wait for the store (`sluice_pending_decisions`) before any
/// caller gives up, and Redis is stopped meanwhile, so nothing is answered
/// early however slowly the machine runs. (It gave up on a 20 ms timer
/// before: on a loaded machine some calls had not reached sluice when their
/// caller left, and the count fell short by those.) Spread over 8
/// connections, as an Envoy's workers spread theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_whose_caller_has_gone_never_reaches_redis() {
    // A store timeout far past the test: only the callers give up.
    let (redis, proxy, s) = behind_a_slow_link_within("60s", &["--redis-pool-size", "1"]);
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(s.client().await);
    }
    let pending = || metric(&s.get("/metrics").1, "sluice_pending_decisions").unwrap_or(-1.0);
    assert_eq!(pending(), 0.0);
    redis.signal("STOP");
    let call = |i: usize| {
        let mut c = clients[i % clients.len()].clone();
        tokio::spawn(async move {
            c.should_rate_limit(request("web", vec![descriptor(&[("open", "z")])]))
                .await
        })
    };
    let sent = proxy.chunks();
    let mut calls = vec![call(0)];
    assert!(
        eventually(Duration::from_secs(10), || proxy.chunks() > sent),
        "the first call never reached the store"
    );
    calls.extend((1..200).map(call));
    assert!(
        eventually(Duration::from_secs(10), || pending() == 200.0),
        "{} of 200 waiting for the store",
        pending()
    );
    // Every caller gives up.
    for c in &calls {
        c.abort();
    }
    for c in calls {
        assert!(
            c.await.is_err_and(|e| e.is_cancelled()),
            "a call was answered"
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || pending() == 0.0
            && bound(&s, "abandoned") == 200.0),
        "{} counted abandoned, {} still pending",
        bound(&s, "abandoned"),
        pending()
    );
    redis.signal("CONT");
    only_the_live_call_reaches_redis(&s, &redis).await;
}

/// A live caller behind them: once it is answered, everything queued before
/// it was gathered (and dropped, its caller gone): Redis counted the call on
/// the wire and the live one, and the breaker never tripped.
async fn only_the_live_call_reaches_redis(s: &Sluice, redis: &RedisServer) {
    // A live caller behind them: once it is answered, everything queued
    // before it was gathered (and dropped, its caller gone).
    let mut c = s.client().await;
    assert_eq!(
        ask(&mut c, "web", &[("open", "after")]).await.overall_code,
        OK
    );
    let seen = redis_total(redis);
    assert_eq!(
        seen, 2,
        "Redis counted {seen}: the call on the wire and the live one"
    );
    let m = s.get("/metrics").1;
    assert_eq!(metric(&m, "sluice_store_circuit_trips_total"), Some(0.0));
}
