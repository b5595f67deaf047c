//! Counters for operators and applications, against the real binary: a
//! lookup on every shape and every store that spends nothing, a reset that
//! empties what the descriptors use and nothing else, another instance that
//! stops refusing from its cache within half a second of a reset, the token
//! (refused, wrong, rotated), email values looked up in clear and never
//! logged, the top in clear, and the `sluice counters` command.

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
    let counts = |doc: &Value| -> Vec<Value> {
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
    };
    assert_eq!(
        counts(&first),
        counts(&again),
        "{store}: a lookup spent something"
    );
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

    let reset = counters(s, "/api/counters/reset", None, shapes);
    assert_eq!(reset["reset"], true);
    assert_eq!(counts(&reset), counts(&first), "{store}: the counts before");
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

#[tokio::test]
async fn only_the_token_is_let_in_and_a_rotated_token_replaces_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret-one\n").unwrap();
    let s = start(&["--admin-token-file", file.to_str().unwrap()]);
    let look = body(&[&[("fixed", "k")]]);
    let (code, text) = admin(&s, "POST", "/api/counters", None, &look);
    assert_eq!((code, text.contains("Bearer")), (401, true), "{text}");
    assert_eq!(
        admin(&s, "POST", "/api/counters/reset", Some("nope"), &look).0,
        401
    );
    assert_eq!(
        admin(&s, "POST", "/api/counters", Some("s3cret-one"), &look).0,
        200
    );
    std::fs::write(&file, "s3cret-two-rotated\n").unwrap();
    assert_eq!(
        admin(&s, "POST", "/api/counters", Some("s3cret-one"), &look).0,
        401
    );
    assert_eq!(
        admin(
            &s,
            "POST",
            "/api/counters/reset",
            Some("s3cret-two-rotated"),
            &look
        )
        .0,
        200
    );
    let m = s.get("/metrics").1;
    assert_eq!(
        metric(&m, "sluice_admin_unauthorized_total"),
        Some(3.0),
        "{m}"
    );
    // Without the token the top stays masked; nothing was refused for it.
    let (code, top) = admin(&s, "GET", "/api/counters/top", None, "");
    assert_eq!(
        (code, top.contains("\"clear\":false")),
        (200, true),
        "{top}"
    );
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("counters reset")));
    let logs = s.logs.lock().unwrap().join("\n");
    assert!(!logs.contains("s3cret"), "a token reached the log");
    assert!(
        logs.contains("counters request refused"),
        "refusals are logged"
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_a_reset_touches_no_other_counter() {
    let s = start(&["--max-descriptors", "2"]);
    let mut c = s.client().await;
    for v in ["mine", "other"] {
        assert_eq!(spend(&mut c, &[("fixed", v)], 2).await, 2);
    }
    let cases = [
        ("{\"domain\":", "invalid RateLimitRequest JSON"),
        (
            r#"{"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#,
            "nowhere",
        ),
        (
            &*body(&[&[("a", "1")], &[("a", "2")], &[("a", "3")]]),
            "descriptors",
        ),
        (r#"{"domain":"auth","descriptors":[]}"#, "descriptor"),
        (
            r#"{"domain":"auth","descriptors":[{"entries":[]}]}"#,
            "descriptor 1 has no entries",
        ),
    ];
    for (bad, says) in cases {
        let (code, text) = admin(&s, "POST", "/api/counters/reset", None, bad);
        assert_eq!(code, 400, "{bad}: {text}");
        assert!(text.contains(says), "{bad}: {text}");
    }
    // A reset that meets no limit says so: 404, nothing reset.
    let (code, text) = admin(
        &s,
        "POST",
        "/api/counters/reset",
        None,
        &body(&[&[("nomatch", "x")]]),
    );
    assert_eq!(code, 404, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (doc["reset"].clone(), doc["counters_reset"].clone()),
        (false.into(), 0.into()),
        "{text}"
    );
    let reset = counters(&s, "/api/counters/reset", None, &[&[("fixed", "mine")]]);
    assert_eq!(limits(&reset)[0]["count"], 2);
    assert_eq!(reset["counters_reset"], 1);
    let other = counters(&s, "/api/counters", None, &[&[("fixed", "other")]]);
    assert_eq!(
        limits(&other)[0]["count"],
        2,
        "another descriptor's counter"
    );
    // No rule, and why; a wildcard names its pattern.
    let why = counters(
        &s,
        "/api/counters",
        None,
        &[
            &[("tier", "credentials"), ("nope", "x")],
            &[("web", "beacon-7")],
        ],
    );
    let steps = &why["descriptors"][0]["match"];
    assert_eq!(steps["steps"][0]["how"], "exact");
    assert_eq!(steps["steps"][1]["how"], "no_rule");
    assert!(
        steps["why_none"]
            .as_str()
            .unwrap()
            .contains("entry 2 (nope)"),
        "{why}"
    );
    assert_eq!(
        why["descriptors"][1]["match"]["steps"][0]["pattern"],
        "web_beacon*"
    );
    assert_eq!(why["descriptors"][1]["limits"][0]["count"], 0);
}

/// An operator types the address; the lookup finds the hashed counter. The
/// top in clear (with the token) shows the digest, never the address, with
/// a lookup ready to send; no log line or metric holds the address.
#[tokio::test]
async fn an_email_is_looked_up_in_clear_and_never_reaches_a_log_or_metric() {
    let s = start(&[]);
    let mut c = s.client().await;
    assert_eq!(
        spend(&mut c, &[("email", "Bob.Smith+promo@Example.COM")], 5).await,
        3
    );
    let found = counters(
        &s,
        "/api/counters",
        None,
        &[&[("email", "bob.smith@example.com")]],
    );
    assert_eq!(limits(&found)[0]["count"], 5, "{found}");
    let (code, top) = admin(&s, "GET", "/api/counters/top", None, "");
    assert_eq!(code, 200);
    let top: Value = serde_json::from_str(&top).unwrap();
    assert_eq!(top["clear"], true);
    let key = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["rule"] == "email")
        .expect("in the top")
        .clone();
    let digest = key["entries"][0]["value"].as_str().unwrap().to_owned();
    assert_eq!(digest.len(), 32, "{key}");
    assert!(key["command"].as_str().unwrap().contains(&digest));
    let (code, again) = admin(
        &s,
        "POST",
        "/api/counters",
        None,
        &key["lookup"].to_string(),
    );
    assert_eq!(code, 200, "{again}");
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        limits(&again)[0]["count"],
        5,
        "the top's lookup finds the counter"
    );
    counters(
        &s,
        "/api/counters/reset",
        None,
        &[&[("email", "BOB.SMITH@example.com")]],
    );
    assert_eq!(
        spend(&mut c, &[("email", "bob.smith@example.com")], 1).await,
        1
    );
    let logs = s.logs.lock().unwrap().join("\n").to_lowercase();
    let metrics = s.get("/metrics").1.to_lowercase();
    for text in [&logs, &metrics] {
        assert!(!text.contains("bob.smith") && !text.contains("example.com"));
    }
}

#[tokio::test]
async fn the_counters_command_shows_resets_and_lists_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "cli-token\n").unwrap();
    let s = start(&["--admin-token-file", file.to_str().unwrap()]);
    let mut c = s.client().await;
    assert_eq!(spend(&mut c, &[("fixed", "cli")], 5).await, 3);
    let url = format!("http://{}", s.admin);
    let run = |args: &[&str], token: Option<&str>| {
        let mut cmd = std::process::Command::new(sluice_bin());
        cmd.arg("counters").args(args).args(["--admin", &url]);
        cmd.env_remove("SLUICE_ADMIN_TOKEN");
        if let Some(t) = token {
            cmd.env("SLUICE_ADMIN_TOKEN", t);
        }
        let out = cmd.output().expect("sluice counters");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = run(
        &["show", "--domain", "auth", "--descriptor", "fixed=cli"],
        None,
    );
    assert!(!ok && err.contains("401"), "{err}");
    let (ok, out, err) = run(
        &["show", "--domain", "auth", "--descriptor", "fixed=cli"],
        Some("cli-token"),
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("fixed=cli") && out.contains("refused") && out.contains(" 5 "),
        "{out}"
    );
    let tf = file.to_str().unwrap();
    let (ok, out, err) = run(&["top", "--token-file", tf], None);
    assert!(
        ok && out.contains("sluice counters show --domain auth --descriptor 'fixed=cli'"),
        "{out}{err}"
    );
    let (ok, out, _) = run(
        &[
            "reset",
            "--domain",
            "auth",
            "--descriptor",
            "fixed=cli",
            "--json",
        ],
        Some("cli-token"),
    );
    assert!(ok);
    let doc: Value = serde_json::from_str(&out).expect("--json");
    assert_eq!(
        (doc["reset"].clone(), limits(&doc)[0]["count"].clone()),
        (json!(true), json!(5))
    );
    assert_eq!(spend(&mut c, &[("fixed", "cli")], 1).await, 1);
}
