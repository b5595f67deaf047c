//! Limits chosen with evidence, against the real binary: a known
//! population (key i sends i requests, and a few heavy keys) through two
//! instances sharing one Redis and through the memory store; the fleet's
//! answer (the sum of the instances') for several candidate limits against
//! the exact count; every shape, refunds and shadow mode; `sluice advise`.

mod common;
#[path = "usage_advice/keys.rs"]
mod keys;
#[path = "usage_advice/leases.rs"]
mod leases;

use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use serde_json::Value;

const RULES: &str = "
domain: auth
descriptors:
  - key: ip
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: slide
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 10}
  - key: slots
    descriptors:
      - key: id
        rate_limit: {algorithm: concurrency, max_in_flight: 5, lease: 10m}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: watch
    descriptors:
      - key: id
        shadow_mode: true
        rate_limit: {algorithm: concurrency, max_in_flight: 2, lease: 10m}
  - key: persec
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
  - key: fast
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 360000, algorithm: token_bucket, burst: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 100000}
";

fn start(extra: &[&str]) -> Sluice {
    let s = Sluice::start(&[("auth.yaml", RULES)], extra);
    assert!(eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"));
    s
}

/// An instance counting in `redis`.
fn on_redis(redis: &RedisServer) -> Sluice {
    start(&["--redis-url", &redis.url(), "--redis-timeout", "2s"])
}

fn usage(s: &Sluice, query: &str) -> Value {
    let (code, body) = s.get(&format!("/api/usage?{query}"));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// `rule` as `/api/usage?domain=auth` lists it.
fn listed(s: &Sluice, rule: &str) -> Value {
    let list = usage(s, "domain=auth");
    let found = list["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule);
    found.expect("the rule is listed").clone()
}

/// The fleet's answer for `limit` on `rule`: summed over the instances
/// (each one's figures are its share, below 0 where it took back a refund
/// of hits another counted).
fn fleet(instances: &[&Sluice], rule: &str, limit: u64) -> (u64, u64, u64) {
    let mut sum = [0i64; 3];
    for s in instances {
        let v = usage(s, &format!("domain=auth&rule={rule}&limit={limit}"));
        for w in v["windows"].as_array().unwrap() {
            for (total, field) in sum
                .iter_mut()
                .zip(["keys", "keys_refused", "requests_refused"])
            {
                *total += w[field].as_i64().unwrap();
            }
        }
    }
    let [k, kr, rr] = sum.map(|n| u64::try_from(n).expect("the fleet's figures are never below 0"));
    (k, kr, rr)
}

/// Key i (1..=60) sends i requests on `rule`, spread over `clients` in
/// turn; three heavy keys send 300 each. Returns each key's total.
async fn population(clients: &mut [Client], rule: &str) -> Vec<u64> {
    let mut totals: Vec<u64> = (1..=60).collect();
    totals.extend([300, 300, 300]);
    // The keys at once, each key's requests in turn over the instances:
    // which request crosses a level is the store's to say, not the order's.
    let sends = totals.iter().enumerate().map(|(key, n)| {
        let mut clients = clients.to_vec();
        let (rule, n) = (rule.to_owned(), *n);
        tokio::spawn(async move {
            let count = clients.len();
            for i in 0..n {
                let c = &mut clients[(key + i as usize) % count];
                ask(c, "auth", &[(rule.as_str(), &format!("10.0.0.{key}"))]).await;
            }
        })
    });
    for s in futures_util::future::join_all(sends).await {
        s.expect("sender");
    }
    totals
}

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

/// A shadow-mode rule (the advisor's workflow: count, never refuse) gives
/// every key's whole demand: what the over-limit cache answered is counted
/// by the store within a quarter second, so the figures are polled until
/// they hold every request.
fn check(totals: &[u64], instances: &[&Sluice], place: &str) {
    let all: i64 = totals.iter().sum::<u64>() as i64;
    let hits = || -> i64 {
        instances
            .iter()
            .flat_map(|s| {
                usage(s, "domain=auth&rule=ip")["windows"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|w| w["hits"].as_i64().unwrap_or(0))
            .sum()
    };
    assert!(
        eventually(Duration::from_secs(5), || hits() == all),
        "{place}: the fleet's figures hold {} hits of {all}",
        hits()
    );
    let exact_keys = |l: u64| totals.iter().filter(|t| **t > l).count() as u64;
    let exact_requests = |l: u64| totals.iter().map(|t| t.saturating_sub(l)).sum::<u64>();
    for l in [1, 5, 10, 25, 40, 59, 100, 299, 300] {
        let (keys, keys_refused, requests_refused) = fleet(instances, "ip", l);
        assert_eq!(keys, totals.len() as u64, "{place}: every key is seen once");
        // Exact at every level; between levels (past 32, at most 5% apart)
        // a limit reads as the level at or just below it.
        let low = exact_keys(l);
        let high = exact_keys((l as f64 / 1.05).floor() as u64);
        assert!(
            (low..=high).contains(&keys_refused),
            "{place} L={l}: {keys_refused} keys refused, exact {low}"
        );
        if l < 32 {
            assert_eq!(keys_refused, low, "{place} L={l}: exact below 32");
        }
        // Each key's count is known within 5% of its peak (a key just
        // under L may read as just over it).
        let exact = exact_requests(l) as f64;
        let got = requests_refused as f64;
        let near = (l as f64 / 1.05).floor() as u64;
        let peaks: u64 = totals.iter().filter(|t| **t > near).sum();
        assert!(
            (got - exact).abs() <= peaks as f64 * 0.05 + 1.0,
            "{place} L={l}: {got} requests refused, exact {exact}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_answer_for_any_limit_is_the_exact_count_within_five_percent() {
    let redis = RedisServer::start();
    let (a, b) = (on_redis(&redis), on_redis(&redis));
    let mut clients = vec![a.client().await, b.client().await];
    let totals = population(&mut clients, "ip").await;
    check(&totals, &[&a, &b], "two instances on Redis");
    // An enforced rule: its keys past the limit are answered from the
    // cache, so their demand shows up to just past it; what the limit (or
    // a lower one) refuses is exact.
    let enforced = population(&mut clients, "login").await;
    for l in [1, 5, 10] {
        let (keys, refused, _) = fleet(&[&a, &b], "login", l);
        let exact = enforced.iter().filter(|t| **t > l).count() as u64;
        assert_eq!((keys, refused), (63, exact), "enforced L={l}");
    }

    // sluice advise over both instances: their shares summed, the fleet's
    // figures (63 keys, 53 past the limit of 10).
    let line = advise_line(&a, &[&b], "ip");
    assert!(line.contains(" 63 ") && line.contains(" 53 "), "{line}");
    // One instance alone shows its share only (KEYS is the fifth column).
    let alone = advise_line(&a, &[], "ip");
    let keys: u64 = alone
        .split_whitespace()
        .nth(4)
        .and_then(|k| k.parse().ok())
        .unwrap();
    assert!(keys < 63, "{alone}");

    let memory = start(&[]);
    let mut clients = vec![memory.client().await];
    let totals = population(&mut clients, "ip").await;
    check(&totals, &[&memory], "memory");

    // The rule list: quantiles and what the current limit (10) refused.
    let ip = listed(&memory, "ip");
    assert_eq!(ip["usage"]["keys"], 63);
    assert_eq!(ip["refused_by_limit"]["keys"], 53, "{ip}");
    let p50 = ip["usage"]["p50"].as_u64().unwrap();
    assert!((30..=33).contains(&p50), "{ip}");
    assert!(ip["usage"]["max"].as_u64().unwrap() >= 285, "{ip}");

    // sluice advise: the same, as a table.
    let line = advise_line(&memory, &[], "ip");
    assert!(line.contains(" 63 ") && line.contains(" 53 "), "{line}");
}

/// `sluice advise`'s line for `rule` of domain auth, asking `first` and
/// each of `also`.
fn advise_line(first: &Sluice, also: &[&Sluice], rule: &str) -> String {
    let mut args = vec![
        "advise".to_owned(),
        "--admin".into(),
        format!("http://{}", first.admin),
        "--domain".into(),
        "auth".into(),
    ];
    for s in also {
        args.extend(["--also".to_owned(), format!("http://{}", s.admin)]);
    }
    let out = std::process::Command::new(sluice_bin())
        .args(&args)
        .output()
        .expect("sluice advise");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("auth") && l.contains(&format!(" {rule} ")))
        .map(str::to_owned);
    line.unwrap_or_else(|| panic!("no line for {rule}: {text}"))
}

#[tokio::test]
async fn every_shape_refunds_and_shadow_mode_count_usage() {
    let s = start(&[]);
    let mut c = s.client().await;
    let max = |rule: &str| {
        let v = usage(&s, &format!("domain=auth&rule={rule}"));
        (
            v["usage"]["max"].as_u64().unwrap(),
            v["keys_refused"].as_u64().unwrap(),
        )
    };
    for _ in 0..14 {
        ask(&mut c, "auth", &[("slide", "k")]).await;
    }
    assert_eq!(max("slide"), (14, 1));
    // An enforced bucket's usage is the tokens taken in the window: 10 of
    // 14 (its burst), against a rate of 1 an hour.
    for _ in 0..14 {
        ask(&mut c, "auth", &[("bucket", "k")]).await;
    }
    assert_eq!(max("bucket"), (10, 1));
    for id in ["a", "b", "c"] {
        ask(&mut c, "auth", &[("slots", "k"), ("id", id)]).await;
    }
    assert_eq!(max("slots.id").0, 3);
    a_refund_lowers_a_keys_usage(&s, &mut c).await;

    // Shadow mode: everything passes; the usage shows whom 5 would refuse.
    for _ in 0..9 {
        assert_eq!(
            ask(&mut c, "auth", &[("shadow", "k")]).await.overall_code,
            OK
        );
    }
    let v = usage(&s, "domain=auth&rule=shadow");
    assert_eq!(
        (v["keys_refused"].as_u64(), v["requests_refused"].as_u64()),
        (Some(1), Some(4))
    );
    // A concurrency rule in shadow mode holds its slots past the limit (up
    // to twice it), so the advisor sees how far demand goes past it.
    for id in ["a", "b", "c", "d"] {
        let d = descriptor(&[("watch", "k"), ("id", id)]);
        let r = c.should_rate_limit(request("auth", vec![d])).await.unwrap();
        assert_eq!(r.into_inner().overall_code, OK);
    }
    assert_eq!(max("watch.id"), (4, 1));
    // Bad queries: a 400 naming what.
    assert_eq!(s.get("/api/usage?domain=nope").0, 400);
    assert_eq!(s.get("/api/usage?domain=auth&rule=nope").0, 400);
    assert_eq!(s.get("/api/usage?domain=auth&rule=ip&limit=x").0, 400);
}

/// A refund lowers a key's usage: 8 spent, 5 given back.
async fn a_refund_lowers_a_keys_usage(s: &Sluice, c: &mut Client) {
    // A refund lowers a key's usage: 8 spent, 5 given back.
    let mut req = request("auth", vec![descriptor(&[("tokens", "k")])]);
    req.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: 8 });
    c.should_rate_limit(req.clone()).await.unwrap();
    let v = usage(s, "domain=auth&rule=tokens&limit=3");
    assert_eq!(v["keys_refused"], 1, "8 > 3 before the refund");
    let mut refund = req;
    refund.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: 5 });
    refund.descriptors[0].is_negative_hits = true;
    c.should_rate_limit(refund).await.unwrap();
    let v = usage(s, "domain=auth&rule=tokens&limit=3");
    assert_eq!(v["keys_refused"], 0, "3 left after the refund: {v}");
}
