//! Clocks that disagree, on real processes with libfaketime: windows are
//! the shared store's, so an instance whose own clock is off, or a store
//! whose clock stepped, never splits one real window into two counts
//! (the book's "Clocks", Stores and failure).

mod common;

use common::redis::RedisServer;
use common::*;

const RULES: &str = "domain: clocks\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

/// Redis's clock, in seconds.
fn redis_now(redis: &RedisServer) -> u64 {
    redis
        .cli(&["time"])
        .lines()
        .next()
        .and_then(|s| s.trim().parse().ok())
        .expect("TIME")
}

/// A sluice on `redis` whose own wall clock is `offset` seconds off
/// (libfaketime; its monotonic clock is the host's).
fn skewed(redis: &RedisServer, offset: i64, extra: &[&str]) -> Sluice {
    let dir = config_dir(&[("clocks.yaml", RULES)]);
    let lib = faketime_lib();
    let fake = format!("{offset:+}");
    let url = redis.url();
    let mut args = vec!["--redis-url", url.as_str(), "--redis-timeout", "2s"];
    args.extend_from_slice(extra);
    let mut s = Sluice::start_at_env(
        dir.path(),
        "127.0.0.1:0",
        &args,
        &[
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME", fake.as_str()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    s.keep(dir);
    s
}

/// Two instances, one an hour ahead of the other (and of Redis): one
/// hour's limit of 3 holds across both, in one key, in either key format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_an_hour_ahead_counts_in_the_stores_window() {
    for format in ["sluice", "envoyproxy"] {
        let redis = RedisServer::start();
        let extra = ["--key-format", format];
        let right = skewed(&redis, 0, &extra);
        let ahead = skewed(&redis, 3_600, &extra);
        let (mut r, mut a) = (right.client().await, ahead.client().await);
        // A value of its own per try: an hour's boundary between the first
        // and the last request would start a new count.
        for attempt in 0.. {
            let hour = redis_now(&redis) / 3_600;
            let value = format!("u{attempt}");
            let e = [("user", value.as_str())];
            let mut codes = Vec::new();
            for _ in 0..2 {
                codes.push(ask(&mut r, "clocks", &e).await.overall_code);
            }
            for _ in 0..2 {
                codes.push(ask(&mut a, "clocks", &e).await.overall_code);
            }
            if redis_now(&redis) / 3_600 != hour && attempt < 3 {
                continue;
            }
            assert_eq!(
                codes,
                [OK, OK, OK, OVER],
                "{format}: the instance an hour ahead counted in its own hour"
            );
            let keys: Vec<String> = redis
                .counter_keys()
                .into_iter()
                .filter(|k| format == "sluice" || k.contains(&value))
                .collect();
            assert_eq!(keys.len(), 1, "{format}: one window, one key: {keys:?}");
            if format == "envoyproxy" {
                assert!(
                    keys[0].ends_with(&format!("_{}", hour * 3_600)),
                    "the reference's key of Redis's hour: {keys:?}"
                );
            }
            break;
        }
    }
}

/// The instance's clock steps into the next window (its monotonic clock
/// too, which the clock it decides by runs on between readings of Redis's):
/// until it reads Redis's clock again it names the next minute, and Redis
/// counts each request in its own minute all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_stays_in_the_stores_window_when_the_instances_clock_steps() {
    let redis = RedisServer::start();
    let dir = config_dir(&[(
        "clocks.yaml",
        "domain: clocks\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )]);
    let file = dir.path().join("faketime.txt");
    std::fs::write(&file, "+0").expect("write");
    let lib = faketime_lib();
    let file_s = file.display().to_string();
    let url = redis.url();
    let mut s = Sluice::start_at_env(
        dir.path(),
        "127.0.0.1:0",
        // No refusal remembered: the last request asks Redis.
        &[
            "--redis-url",
            &url,
            "--redis-timeout",
            "2s",
            "--local-cache-size",
            "0",
        ],
        &[
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME_TIMESTAMP_FILE", file_s.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
        ],
    );
    let mut c = s.client().await;
    let mut offset = 0;
    for attempt in 0.. {
        let value = format!("u{attempt}");
        let e = [("user", value.as_str())];
        let before = redis_now(&redis);
        let mut codes = Vec::new();
        for _ in 0..3 {
            codes.push(ask(&mut c, "clocks", &e).await.overall_code);
        }
        // One second into the instance's next minute, well before Redis's.
        let now = redis_now(&redis);
        if (now / 60 != before / 60 || now % 60 > 50) && attempt < 5 {
            continue;
        }
        offset += (now / 60 + 1) * 60 + 1 - now;
        std::fs::write(&file, format!("+{offset}")).expect("step");
        codes.push(ask(&mut c, "clocks", &e).await.overall_code);
        let after = redis_now(&redis);
        assert_eq!(after / 60, now / 60, "Redis's minute ran out; rerun");
        assert_eq!(
            codes,
            [OK, OK, OVER, OVER],
            "the stepped instance counted in a minute Redis is not in"
        );
        break;
    }
    s.keep(dir);
}
