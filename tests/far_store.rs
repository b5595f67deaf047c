//! A shared store two regions away: two instances on one redis-server, each
//! through a delay line 40 ms each way (an 80 ms round trip), leases on and
//! renewed ahead (the defaults), `--redis-timeout 400ms`. What sluice
//! guarantees there: a key near its limit admits exactly the limit; a hot
//! key far from it is counted exactly, its leases renewed ahead in the
//! background; and a store that answers, however far, never trips the
//! breaker nor hands a request to the failure policy. How fast is
//! `make bench`'s (`benches/far.rs`), never asserted here.

mod common;

use std::time::Duration;

use common::far::FarLink;
use common::redis::RedisServer;
use common::stack::room_in_window;
use common::*;

const RULES: &str = "
domain: far
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 100000}
  - key: near
    rate_limit: {unit: hour, requests_per_unit: 300}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, count_after: true}
  - key: after
    rate_limit: {unit: hour, requests_per_unit: 300, count_after: true}
";

/// `--count-after-credit`: a key of 300 has a credit of 30.
const CREDIT_PERCENT: u64 = 10;

/// An instance reaching `redis` through a delay line of `ms` each way.
fn far_instance(redis: &RedisServer, ms: u64) -> Sluice {
    let link = FarLink::start(redis.port, Duration::from_millis(ms));
    let url = format!("redis://127.0.0.1:{}", link.port);
    let s = Sluice::start(
        &[("far.yaml", RULES)],
        &[
            "--redis-url",
            &url,
            "--redis-timeout",
            "400ms",
            "--count-after-credit",
            &CREDIT_PERCENT.to_string(),
        ],
    );
    assert!(eventually(Duration::from_secs(20), || s.readyz()["status"] == "ready"));
    s
}

/// `n` requests on `rule=value` from 16 clients over `fleet` in turn: how
/// many were admitted.
async fn send(fleet: &[&Sluice], rule: &str, value: &str, n: usize) -> usize {
    let mut clients = Vec::new();
    for s in fleet {
        clients.push(s.client().await);
    }
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(n));
    let tasks: Vec<_> = (0..16)
        .map(|c| {
            let mut client = clients[c % clients.len()].clone();
            let (left, rule, value) = (left.clone(), rule.to_owned(), value.to_owned());
            tokio::spawn(async move {
                let mut ok = 0;
                while left
                    .fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |l| l.checked_sub(1),
                    )
                    .is_ok()
                {
                    let r = ask(&mut client, "far", &[(rule.as_str(), value.as_str())]).await;
                    ok += usize::from(r.overall_code == 1);
                }
                ok
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.expect("client");
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_store_counts_exactly_and_never_trips_the_breaker() {
    let redis = RedisServer::start();
    let (a, b) = (far_instance(&redis, 40), far_instance(&redis, 40));
    room_in_window(3600, 120);

    let near = send(&[&a, &b], "near", "n1", 600).await;
    assert_eq!(near, 300, "a key near its limit admits exactly the limit");

    let hot = send(&[&a, &b], "hot", "h1", 3_000).await;
    assert_eq!(
        hot, 3_000,
        "a hot key far from its limit admits every request"
    );
    let renewed: f64 = [&a, &b]
        .iter()
        .filter_map(|s| {
            metric(
                &s.get("/metrics").1,
                "sluice_store_allowance_renewals_ahead_total",
            )
        })
        .sum();
    assert!(renewed > 0.0, "the hot key's leases were renewed ahead");

    // Slow is not down: no trip, no policy decision, whatever the distance.
    for s in [&a, &b] {
        assert_eq!(
            trips_and_policy(s),
            (0.0, 0.0),
            "trips and policy decisions on a far store"
        );
        assert_eq!(s.status(), "ready");
    }
    // The console shows the distance and the renewals.
    let (_, console) = a.get("/api/console");
    let doc: serde_json::Value = serde_json::from_str(&console).expect("json");
    let rtt = doc["store"]["round_trip_ms"].as_f64().unwrap_or(0.0);
    assert!(rtt >= 80.0, "the console's round trip: {rtt} ms");
    assert!(doc["store"]["renewals_ahead"].as_u64().is_some(), "{doc}");
}

fn metric_sum(fleet: &[&Sluice], name: &str) -> f64 {
    fleet
        .iter()
        .filter_map(|s| metric(&s.get("/metrics").1, name))
        .sum()
}

/// `count_after`: cold keys answered on credit, counted in the store
/// after, and a key hammered from both instances past its limit by at most
/// the stated bound (instances x credit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_count_after_are_answered_on_credit_within_the_stated_bound() {
    let redis = RedisServer::start();
    let (a, b) = (far_instance(&redis, 40), far_instance(&redis, 40));
    room_in_window(3600, 120);
    let fleet = [&a, &b];

    // 300 users seen for the first time, one request each: every one
    // answered on credit, none waiting for the store to count it.
    let mut admitted = 0;
    for u in 0..300 {
        admitted += send(&fleet, "user", &format!("u{u}"), 1).await;
    }
    assert_eq!(admitted, 300);
    let credited = metric_sum(&fleet, "sluice_store_credit_answered_total");
    assert_eq!(credited, 300.0, "each cold key answered on credit");
    // And the store counts them after: 300 keys of one hit each.
    assert!(
        eventually(Duration::from_secs(10), || redis
            .counts()
            .iter()
            .filter(|(_, c)| *c == 1)
            .count()
            == 300),
        "the store's counts: {:?}",
        redis.counts().len()
    );

    // A key hammered from both: the limit, and at most 2 x 30 past it.
    let over = send(&fleet, "after", "k1", 900).await;
    let bound = 300 + 2 * (300 * CREDIT_PERCENT as usize / 100);
    eprintln!("count_after: {over} admitted of a limit of 300 (bound {bound})");
    assert!(
        (300..=bound).contains(&over),
        "admitted {over} of a limit of 300 (bound {bound})"
    );
    for s in fleet {
        assert_eq!(trips_and_policy(s), (0.0, 0.0));
    }
    assert_eq!(
        metric_sum(&fleet, "sluice_store_credit_in_doubt_total"),
        0.0
    );
    marked_on_the_console(&a);
}

/// The console marks the rules that trade exactness, and counts the
/// answers on credit.
fn marked_on_the_console(s: &Sluice) {
    let (_, console) = s.get("/api/console");
    let doc: serde_json::Value = serde_json::from_str(&console).expect("json");
    let marked: Vec<&str> = doc["domains"][0]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["count_after"] == true)
        .filter_map(|r| r["rule"].as_str())
        .collect();
    assert!(
        marked.contains(&"user") && marked.contains(&"after"),
        "{marked:?}"
    );
    assert!(!marked.contains(&"near"), "{marked:?}");
    assert!(doc["store"]["credit_answered"].as_u64() >= Some(1), "{doc}");
}
