//! `make bench`'s far-store table: two sluice instances on one
//! redis-server, each through a delay line (`tests/common/far.rs`), on
//! loopback and with the store `FAR_MS` away each way (40: an 80 ms round
//! trip, two regions apart), `--redis-timeout 400ms`, 16 clients in turn
//! over both instances. Three workloads, as a platform spreading one budget
//! over regions meets them:
//!
//! - **hot**: one key far from its limit (10,000,000 an hour), 60,000 requests;
//! - **near**: one key of 300 an hour, 600 requests (admitted must be 300);
//! - **cold**: 300 keys of 100 an hour, one request each;
//! - **near_after**, **cold_after**: near and cold under `count_after`
//!   (answered on credit, 5% of the limit, counted after: at most
//!   2 x 15 past the limit of 300).
//!
//! Then a store per region: each instance its own redis-server on
//! loopback, every limit halved (each region's share, even demand).
//!
//! Each row: p50, p99, the requests slower than 50 ms (after the hot key's
//! first [`WARM_RTTS`] round trips, while its leases first grow), the admitted, and the takes
//! in the foreground (a request waiting) and ahead (in the background).
//! Latency here is measured, never asserted (`tests/far_store.rs` holds
//! what sluice guarantees). `FAR_MS` sets the distance, `FAR_FLAGS` adds
//! serve flags (`--allowance-ahead false`), and `FAR_SLOW=1` prints when
//! each workload's slow requests were sent (250 ms buckets).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::far::FarLink;
use common::redis::RedisServer;
use common::{Sluice, ask, eventually};

const RULES: &str = "
domain: far
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 10000000}
  - key: near
    rate_limit: {unit: hour, requests_per_unit: 300}
  - key: cold
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: near_after
    rate_limit: {unit: hour, requests_per_unit: 300, count_after: true}
  - key: cold_after
    rate_limit: {unit: hour, requests_per_unit: 100, count_after: true}
";
const CLIENTS: usize = 16;
/// The hot key's first round trips, while its leases grow (at most
/// fourfold a round trip) to what its rate needs: not counted in its row
/// (25 of them, and at least 200 ms).
const WARM_RTTS: u32 = 25;

fn main() {
    let far_ms: u64 = std::env::var("FAR_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let extra: Vec<String> = std::env::var("FAR_FLAGS")
        .map(|f| f.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    println!(
        "| store | workload | requests | p50 ms | p99 ms | > 50 ms | admitted | takes | ahead |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // The far store, on loopback and `far_ms` away; then a store per
    // region (each instance its own Redis, on loopback), each rule's limit
    // split in two.
    for (ms, per_region) in [(0, false), (far_ms, false), (0, true)] {
        let stores: Vec<RedisServer> = (0..1 + usize::from(per_region))
            .map(|_| RedisServer::start())
            .collect();
        let rules = if per_region {
            split(RULES)
        } else {
            RULES.to_owned()
        };
        let fleet: Vec<Sluice> = (0..2)
            .map(|i| instance(&stores[i % stores.len()], ms, &rules, &extra))
            .collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let place = if per_region {
            "a store per region, limits split".to_owned()
        } else if ms == 0 {
            "loopback".to_owned()
        } else {
            format!("{} ms round trip", 2 * ms)
        };
        let workloads = [
            ("hot", 1, 60_000),
            ("near", 1, 600),
            ("cold", 300, 1),
            ("near_after", 1, 600),
            ("cold_after", 300, 1),
        ];
        for (name, keys, each) in workloads {
            let before = takes(&fleet);
            let warm = (Duration::from_millis(2 * ms) * WARM_RTTS).max(Duration::from_millis(200));
            let (lat, admitted) = rt.block_on(run(&fleet, name, keys, each, warm));
            let after = takes(&fleet);
            let took = (after.0 - before.0, after.1 - before.1);
            row(&place, name, &lat, admitted, took);
        }
    }
}

/// An instance on `redis`, through a delay line of `ms` each way.
fn instance(redis: &RedisServer, ms: u64, rules: &str, extra: &[String]) -> Sluice {
    let link = FarLink::start(redis.port, Duration::from_millis(ms));
    let url = format!("redis://127.0.0.1:{}", link.port);
    let mut args = vec!["--redis-url", url.as_str(), "--redis-timeout", "400ms"];
    args.extend(["--log-level", "warn,sluice=info"]);
    args.extend(extra.iter().map(String::as_str));
    let s = Sluice::start(&[("far.yaml", rules)], &args);
    assert!(eventually(Duration::from_secs(20), || s.readyz()["status"] == "ready"));
    s
}

/// `rules` with every limit halved: each region's share of the budget,
/// split evenly (as even demand would split it).
fn split(rules: &str) -> String {
    rules
        .lines()
        .map(|l| match l.split_once("requests_per_unit: ") {
            Some((head, tail)) => {
                let (n, rest) = tail.split_at(
                    tail.find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(tail.len()),
                );
                format!(
                    "{head}requests_per_unit: {}{rest}",
                    n.parse::<u64>().unwrap_or(0) / 2
                )
            }
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `keys` keys of rule `rule`, `each` requests per key, over the fleet
/// from [`CLIENTS`] clients: each answer's latency (after the first
/// second, for a single key) and how many were admitted.
async fn run(
    fleet: &[Sluice],
    rule: &str,
    keys: usize,
    each: usize,
    warm: Duration,
) -> (Vec<Duration>, usize) {
    let mut clients = Vec::new();
    for s in fleet {
        clients.push(s.client().await);
    }
    let jobs: Vec<(usize, usize)> = (0..keys)
        .flat_map(|k| (0..each).map(move |i| (k, i)))
        .collect();
    let jobs = std::sync::Arc::new(std::sync::Mutex::new(jobs.into_iter()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let mut client = clients[c % clients.len()].clone();
            let (jobs, rule) = (jobs.clone(), rule.to_owned());
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let Some((k, _)) = jobs.lock().expect("jobs").next() else {
                        return out;
                    };
                    let sent = Instant::now();
                    let r = ask(&mut client, "far", &[(rule.as_str(), &format!("k{k}"))]).await;
                    out.push((sent - start, sent.elapsed(), r.overall_code == 1));
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut admitted = 0;
    let mut slow: std::collections::BTreeMap<u128, usize> = Default::default();
    for t in tasks {
        for (at, took, ok) in t.await.expect("client") {
            if took > Duration::from_millis(50) {
                *slow.entry(at.as_millis() / 250 * 250).or_default() += 1;
            }
            admitted += usize::from(ok);
            if rule != "hot" || at > warm {
                lat.push(took);
            }
        }
    }
    if std::env::var("FAR_SLOW").is_ok() {
        eprintln!("{rule}: slower than 50 ms, by when sent (ms): {slow:?}");
    }
    (lat, admitted)
}

/// The fleet's takes so far: in the foreground, and ahead.
fn takes(fleet: &[Sluice]) -> (f64, f64) {
    fleet.iter().fold((0.0, 0.0), |(t, a), s| {
        let m = s.get("/metrics").1;
        let read = |name| common::metric(&m, name).unwrap_or(0.0);
        (
            t + read("sluice_store_allowance_leases_total"),
            a + read("sluice_store_allowance_renewals_ahead_total"),
        )
    })
}

fn row(place: &str, name: &str, lat: &[Duration], admitted: usize, took: (f64, f64)) {
    let mut ms: Vec<f64> = lat.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let q = |p: f64| {
        ms.get(((ms.len() as f64 * p) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let slow = ms.iter().filter(|m| **m > 50.0).count();
    println!(
        "| {place} | {name} | {} | {:.1} | {:.1} | {slow} | {admitted} | {} | {} |",
        ms.len(),
        q(0.5),
        q(0.99),
        took.0,
        took.1
    );
}
