//! `make bench`: throughput and latency of the real binary, memory store
//! against Redis, on one hot key and on many keys, plus Redis commands per
//! decision. Client and server share the machine, so read the numbers as a
//! comparison between stores, not as a capacity figure.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;

const RULES: &str = "
domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: flood
    rate_limit: {unit: day, requests_per_unit: 10}
";

const CONCURRENCY: usize = 32;
const RUN: Duration = Duration::from_secs(4);

struct Result {
    requests: usize,
    rps: f64,
    p50: Duration,
    p99: Duration,
}

async fn load(s: &Sluice, key: &'static str, many: bool) -> Result {
    let channels: Vec<_> = futures_util::future::join_all((0..4).map(|_| s.client())).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|t| {
            let mut c = channels[t % channels.len()].clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(100_000);
                let mut i: u64 = t as u64 * 7_919;
                while started.elapsed() < RUN {
                    i = i.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let value = if many {
                        format!(
                            "10.{}.{}.{}",
                            (i >> 40) % 4,
                            (i >> 48) % 256,
                            (i >> 56) % 100
                        )
                    } else {
                        "k".into()
                    };
                    let t0 = Instant::now();
                    let r = ask(&mut c, "bench", &[(key, &value)]).await;
                    lat.push(t0.elapsed());
                    assert!(r.overall_code == OK || key == "flood");
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let took = started.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Result {
        requests: all.len(),
        rps: all.len() as f64 / took.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

fn row(name: &str, r: &Result) {
    println!(
        "| {name:<34} | {:>9.0} | {:>8.0} µs | {:>8.0} µs | {:>9} |",
        r.rps,
        r.p50.as_secs_f64() * 1e6,
        r.p99.as_secs_f64() * 1e6,
        r.requests
    );
}

/// The upper bound of the bucket that holds the 99th percentile.
fn histogram_p99(text: &str, name: &str) -> String {
    let prefix = format!("{name}_bucket{{le=\"");
    let buckets: Vec<(String, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            rest.split_once("\"} ")
                .map(|(le, n)| (le.to_owned(), n.parse().unwrap_or(0.0)))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |b| b.1);
    buckets
        .iter()
        .find(|(_, n)| *n >= total * 0.99)
        .map_or("?".into(), |(le, _)| le.clone())
}

fn redis_calls(redis: &RedisServer) -> u64 {
    ["evalsha", "eval", "incrby", "expire"]
        .iter()
        .map(|c| redis.calls(c))
        .sum()
}

#[tokio::main]
async fn main() {
    println!(
        "concurrency {CONCURRENCY}, {}s per row, 4 HTTP/2 connections, client and server on one machine\n",
        RUN.as_secs()
    );
    println!(
        "| scenario                           |   req/s   |    p50      |    p99      | requests  |"
    );
    println!(
        "|------------------------------------|-----------|-------------|-------------|-----------|"
    );
    let memory = Sluice::start(
        &[("bench.yaml", RULES)],
        &["--log-level", "warn,sluice=info"],
    );
    let m_hot = load(&memory, "hot", false).await;
    row("memory, one hot key", &m_hot);
    let m_many = load(&memory, "ip", true).await;
    row("memory, ~100k keys", &m_many);
    drop(memory);

    let redis = RedisServer::start();
    let url = redis.url();
    let s = Sluice::start(
        &[("bench.yaml", RULES)],
        &["--redis-url", &url, "--log-level", "warn,sluice=info"],
    );
    assert!(eventually(Duration::from_secs(10), || s
        .get("/readyz")
        .1
        .contains("\"ready\"")));
    let before = (
        redis.calls("evalsha") + redis.calls("eval"),
        redis_calls(&redis),
    );
    let r_hot = load(&s, "hot", false).await;
    row("redis, one hot key", &r_hot);
    let r_many = load(&s, "ip", true).await;
    row("redis, ~100k keys", &r_many);
    let after = (
        redis.calls("evalsha") + redis.calls("eval"),
        redis_calls(&redis),
    );
    let decisions = (r_hot.requests + r_many.requests) as f64;
    let flood = load(&s, "flood", false).await;
    row("redis, one key over its limit", &flood);
    let after_flood = redis.calls("evalsha") + redis.calls("eval");
    let (_, metrics) = s.get("/metrics");
    let fallbacks = metric(
        &metrics,
        "sluice_store_policy_decisions_total{policy=\"none\"}",
    )
    .or_else(|| {
        metric(
            &metrics,
            "sluice_store_policy_decisions_total{policy=\"fallback\"}",
        )
    })
    .unwrap_or(0.0);
    let store_p99 = histogram_p99(&metrics, "sluice_store_duration_seconds");
    let request_p99 = histogram_p99(&metrics, "sluice_request_duration_seconds");
    println!();
    println!(
        "server-side p99 (histogram bucket bound): Redis call <= {store_p99}s, whole request <= {request_p99}s"
    );
    println!(
        "p99 added by Redis: hot key {:.0} µs, many keys {:.0} µs",
        (r_hot.p99.as_secs_f64() - m_hot.p99.as_secs_f64()) * 1e6,
        (r_many.p99.as_secs_f64() - m_many.p99.as_secs_f64()) * 1e6
    );
    println!(
        "Redis commands per decision (one descriptor): {:.2} client calls (EVALSHA), {:.2} counting \
         commands in all (EVALSHA + INCRBY + EXPIRE run by the script)",
        (after.0 - before.0) as f64 / decisions,
        (after.1 - before.1) as f64 / decisions
    );
    println!(
        "over-limit flood: {} requests cost Redis {} calls (local cache); decisions by failure policy during the run: {fallbacks}",
        flood.requests,
        after_flood - after.0
    );
}
