//! Counters for operators and applications, against the real binary: a
//! lookup on every shape and every store that spends nothing, a reset that
//! empties what the descriptors use and nothing else, another instance that
//! stops refusing from its cache within half a second of a reset, the token
//! (refused, wrong, rotated), email values looked up in clear and never
//! logged, the top in clear, and the `sluice counters` command.

#[path = "counters/access.rs"]
mod access;
mod common;

use std::time::{Duration, Instant};

use common::memcache::Memcached;
use common::redis::{RedisCluster, RedisSentinel, RedisServer};
use common::*;
use serde_json::{Value, json};

const RULES: &str = "
domain: auth
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 3}
  - key: both
    rate_limits:
      - {unit: minute, requests_per_unit: 3, name: short}
      - {unit: day, requests_per_unit: 100, name: daily}
  - key: in_flight
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max_in_flight: 2, lease: 10m}
  - key: email
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tier
    value: credentials
    descriptors:
      - key: masked_remote_address
        descriptors:
          - key: path
            rate_limit: {unit: hour, requests_per_unit: 3}
  - key: web
    value: 'beacon*'
    rate_limit: {unit: hour, requests_per_unit: 3}
";

fn start(extra: &[&str]) -> Sluice {
    start_with(RULES, extra)
}

const LEASES: &str = "  - key: in_flight
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, max_in_flight: 2, lease: 10m}
";

fn start_with(rules: &str, extra: &[&str]) -> Sluice {
    let s = Sluice::start(&[("auth.yaml", rules)], extra);
    assert!(
        eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
        "{:?}",
        s.readyz()
    );
    s
}

/// One call to the admin port with an optional bearer token.
fn admin(s: &Sluice, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    http_with(s.admin, method, path, &headers, body)
}

fn body(descriptors: &[&[(&str, &str)]]) -> String {
    let ds: Vec<Value> = descriptors
        .iter()
        .map(|d| {
            let entries: Vec<Value> = d
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect();
            json!({"entries": entries})
        })
        .collect();
    json!({"domain": "auth", "descriptors": ds}).to_string()
}

/// `POST path` with `descriptors`, expecting 200: the answer.
fn counters(s: &Sluice, path: &str, token: Option<&str>, descriptors: &[&[(&str, &str)]]) -> Value {
    let (code, text) = admin(s, "POST", path, token, &body(descriptors));
    assert_eq!(code, 200, "{path}: {text}");
    serde_json::from_str(&text).expect("json")
}

/// The limits of the first descriptor of a lookup.
fn limits(doc: &Value) -> Vec<Value> {
    doc["descriptors"][0]["limits"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn spend(c: &mut Client, entries: &[(&str, &str)], n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(ask(c, "auth", entries).await.overall_code == OK);
    }
    ok
}

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

/// Every limit's count in a lookup's answer, in order.
fn counts(doc: &Value) -> Vec<Value> {
    doc["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| {
            d["limits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["count"].clone())
        })
        .collect()
}

/// Spends every shape past its limit, looks up twice (nothing changes),
/// resets, and finds every counter empty and the next request admitted.
async fn every_shape(s: &Sluice, store: &str, concurrency: bool) {
    // `both:short` counts per minute: all of this within one.
    common::stack::room_in_window(60, 20);
    let mut c = s.client().await;
    for key in ["fixed", "sliding", "bucket", "both"] {
        assert_eq!(spend(&mut c, &[(key, "k")], 4).await, 3, "{store} {key}");
    }
    if concurrency {
        for id in ["r1", "r2", "r3"] {
            ask(&mut c, "auth", &[("in_flight", "x"), ("request_id", id)]).await;
        }
    }
    let shapes: &[&[(&str, &str)]] = &[
        &[("fixed", "k")],
        &[("sliding", "k")],
        &[("bucket", "k")],
        &[("both", "k")],
        &[("in_flight", "x"), ("request_id", "probe")],
    ];
    let first = counters(s, "/api/counters", None, shapes);
    let again = counters(s, "/api/counters", None, shapes);
    assert_eq!(
        counts(&first),
        counts(&again),
        "{store}: a lookup spent something"
    );
    each_shape_counts_what_was_spent(&first, store, concurrency);

    a_reset_empties_every_counter(s, shapes, &first, store, concurrency);

    for key in ["fixed", "sliding", "bucket", "both"] {
        assert_eq!(
            spend(&mut c, &[(key, "k")], 1).await,
            1,
            "{store} {key} after the reset"
        );
    }
    if concurrency {
        let r = ask(&mut c, "auth", &[("in_flight", "x"), ("request_id", "r4")]).await;
        assert_eq!(r.overall_code, OK, "{store}: slots released");
    }
}

/// A reset answers the counts before and leaves every counter empty, both
/// windows of a sliding window too.
fn a_reset_empties_every_counter(
    s: &Sluice,
    shapes: &[&[(&str, &str)]],
    first: &Value,
    store: &str,
    concurrency: bool,
) {
    let reset = counters(s, "/api/counters/reset", None, shapes);
    assert_eq!(reset["reset"], true);
    assert_eq!(counts(&reset), counts(first), "{store}: the counts before");
    let after = counters(s, "/api/counters", None, shapes);
    for (i, d) in after["descriptors"].as_array().unwrap().iter().enumerate() {
        for l in d["limits"].as_array().unwrap() {
            if i == 4 && !concurrency {
                continue;
            }
            assert_eq!(l["count"], 0, "{store}: not empty after the reset: {l}");
            assert_eq!(l["over_limit"], false, "{store}: {l}");
        }
    }
    if let Some(p) = after["descriptors"][1]["limits"][0].get("previous_window_count") {
        assert_eq!(*p, 0, "{store}: both windows of a sliding window");
    }
}

/// What the first lookup says of each shape: a refused hit counted in its
/// window, the bucket's tokens taken, every limit of a list, the daily
/// limit's leased allowance and the slots held.
fn each_shape_counts_what_was_spent(first: &Value, store: &str, concurrency: bool) {
    let l = |i: usize| first["descriptors"][i]["limits"].clone();
    // A refused hit is counted in a window (as the reference does).
    assert_eq!(l(0)[0]["count"], 4, "{store} fixed: {first}");
    assert_eq!(l(0)[0]["over_limit"], true);
    assert_eq!(l(0)[0]["remaining"], 0);
    assert!(l(0)[0]["reset_seconds"].as_u64().unwrap() <= 3600);
    assert_eq!(l(1)[0]["count"], 4, "{store} sliding: {first}");
    assert_eq!(l(1)[0]["shape"], "sliding_window");
    assert_eq!(l(2)[0]["count"], 3, "{store} bucket: tokens taken: {first}");
    assert_eq!(l(2)[0]["over_limit"], true);
    let both = l(3);
    assert_eq!(both.as_array().unwrap().len(), 2, "every limit of the list");
    assert_eq!(both[0]["rule"], "both:short");
    assert_eq!(both[0]["count"], 4);
    // The daily limit, far from reached, is served from allowance leased
    // from a shared store: its count holds what this instance leased and
    // has not spent yet, at most an eighth of what was left.
    let daily = both[1]["count"].as_u64().unwrap();
    assert!((4..=4 + 100 / 8).contains(&daily), "{store}: {daily}");
    assert_eq!(both[1]["over_limit"], false);
    if concurrency {
        assert_eq!(l(4)[0]["count"], 2, "{store}: slots held: {first}");
        assert_eq!(l(4)[0]["over_limit"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_spend_nothing_and_resets_empty_every_shape_on_every_store() {
    every_shape(&start(&[]), "memory", true).await;
    let redis = RedisServer::start();
    let url = redis.url();
    every_shape(
        &start(&["--redis-url", &url, "--redis-timeout", "2s"]),
        "redis",
        true,
    )
    .await;
    redis.cli(&["FLUSHALL"]);
    let reference = [
        "--redis-url",
        &url,
        "--redis-timeout",
        "2s",
        "--key-format",
        "envoyproxy",
    ];
    every_shape(&start(&reference), "redis envoyproxy keys", true).await;
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds();
    every_shape(
        &start(&["--redis-cluster", &seeds, "--redis-timeout", "2s"]),
        "cluster",
        true,
    )
    .await;
    let master = RedisServer::start();
    let sentinel = RedisSentinel::start("mymaster", master.port);
    let spec = format!("mymaster@127.0.0.1:{}", sentinel.port);
    every_shape(
        &start(&["--redis-sentinel", &spec, "--redis-timeout", "2s"]),
        "sentinel",
        true,
    )
    .await;
    let mc = Memcached::start();
    let addr = mc.addr();
    // memcached holds no leases (concurrency needs Redis or memory).
    let no_leases = RULES.replace(LEASES, "");
    assert_ne!(no_leases, RULES);
    let on_memcached = start_with(
        &no_leases,
        &["--memcache-servers", &addr, "--redis-timeout", "2s"],
    );
    every_shape(&on_memcached, "memcached", false).await;
}

/// The cache is on for a rule not marked refundable: an instance that
/// refused from it keeps refusing for half a second at most after a reset
/// or a refund through another instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_through_one_instance_unblocks_the_other_within_half_a_second() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    let b = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    let mut cb = b.client().await;
    let office = [
        ("tier", "credentials"),
        ("masked_remote_address", "203.0.113.0/24"),
        ("path", "/api/auth/login"),
    ];
    let hits = |s: &Sluice| {
        metric(&s.get("/metrics").1, "sluice_store_local_cache_hits_total").unwrap_or(0.0)
    };
    assert_eq!(spend(&mut cb, &office, 6).await, 3, "locked out");
    assert!(hits(&b) > 0.0, "b refused from its cache");
    let before = counters(&a, "/api/counters/reset", None, &[&office]);
    assert_eq!(limits(&before)[0]["count"], 4, "{before}");
    let reset = Instant::now();
    loop {
        let sent = reset.elapsed();
        if spend(&mut cb, &office, 1).await == 1 {
            break;
        }
        assert!(
            sent < Duration::from_millis(500),
            "b refused {sent:?} after the reset"
        );
    }
    // The reset is counted and logged by rule, the address masked.
    let m = a.get("/metrics").1;
    let series = "sluice_counter_resets_total{domain=\"auth\",rule=\"tier_credentials.masked_remote_address.path\"}";
    assert_eq!(metric(&m, series), Some(1.0), "{m}");
    assert!(eventually(Duration::from_secs(5), || a.logs_contain("counters reset")));
    let logs = a.logs.lock().unwrap().join("\n");
    assert!(
        logs.contains("203.0.x.x") && !logs.contains("203.0.113"),
        "{logs}"
    );
}
