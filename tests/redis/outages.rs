//! Outages that never stall an answer: a Redis killed, stopped, slow, or down at startup.

use super::*;
use common::redis::free_port;

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
    shows_it_is_degraded(&s);

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

/// What a limiter whose Redis went down shows: degraded but in rotation, on
/// the fallback with the reason, the breaker open in `/metrics`, and one log
/// line.
fn shows_it_is_degraded(s: &Sluice) {
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
