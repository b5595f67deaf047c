//! `make soak`: a bounded run at a steady moderate rate across many keys, with
//! a reload every 30 s and Redis restarted twice, sampling sluice's resident
//! memory, open file descriptors and TCP connections every 10 s. The curve
//! must be flat after warm-up, and the only non-OK answers are the failure
//! policy's during the Redis gaps (the memory fallback: still OK answers).
//!
//! An attacker runs alongside ([`attacker`]): poison hits, HTTP/2 clients
//! that never read, a thousand idle connections and a distinct-key flood. The
//! honest load must see no errors and memory must stay flat.
//!
//! SOAK_SECONDS (600), SOAK_RATE (2000 req/s) and SOAK_KEYS (100000) tune it.

#[path = "soak/attacker.rs"]
mod attacker;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/proc.rs"]
mod proc;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::{Sluice, eventually, metric};
use proc::{env_or, fds, rss_kib};

fn rules(limit: u64) -> String {
    format!(
        "domain: soak\ndescriptors:\n  - key: ip\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n  - key: flood\n    rate_limit: {{unit: day, requests_per_unit: 10}}\n"
    )
}

fn main() {
    let seconds = env_or("SOAK_SECONDS", 600);
    let rate = env_or("SOAK_RATE", 2000);
    let keys = env_or("SOAK_KEYS", 100_000);
    let mut redis = RedisServer::start();
    let s = Sluice::start(
        &[("soak.yaml", &rules(1_000_000))],
        &[
            "--redis-url",
            &redis.url(),
            "--log-level",
            "warn,sluice=info",
            "--max-counters",
            "200000",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || s
        .get("/readyz")
        .1
        .contains("\"ready\"")));
    let load = honest_load(&s, keys, rate, seconds);
    let attack = attacker::Attacker::start(s.grpc, "soak", seconds);
    println!(
        "soak: {seconds}s at {rate} req/s over {keys} keys; reload every 30s; Redis restarted at 1/3 and 2/3\n"
    );
    let peak_rss = timeline(&s, &mut redis, seconds);
    let out = load.wait_with_output().expect("bench result");
    let tally = attack.stop();
    report(&s, &String::from_utf8_lossy(&out.stdout), &tally, peak_rss);
}

/// The honest load: `sluice bench` at `rate` over `keys` keys.
fn honest_load(s: &Sluice, keys: u64, rate: u64, seconds: u64) -> std::process::Child {
    Command::new(common::sluice_bin())
        .args([
            "bench",
            "--target",
            &s.grpc.to_string(),
            "--domain",
            "soak",
            "--json",
        ])
        .args(["--descriptor", "ip=10.{n}", "--keys", &keys.to_string()])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &format!("{seconds}s"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("sluice bench")
}

/// A reload every 30 s and Redis restarted at 1/3 and 2/3, with a row of
/// RSS, descriptors, sockets, generation and store every 10 s; the peak
/// RSS in KiB.
fn timeline(s: &Sluice, redis: &mut RedisServer, seconds: u64) -> u64 {
    let mut peak_rss = 0u64;
    println!("| t (s) | RSS (MiB) | fds | sockets | config generation | store | event |");
    println!("|---|---|---|---|---|---|---|");
    let started = Instant::now();
    let mut next_sample = 0;
    let mut reloads = 0u64;
    let mut restarts = 0;
    while started.elapsed().as_secs() < seconds {
        let t = started.elapsed().as_secs();
        let mut event = String::new();
        if t >= (reloads + 1) * 30 {
            reloads += 1;
            // Alternate two generous limits: a real change each time.
            let limit = if reloads.is_multiple_of(2) {
                1_000_000
            } else {
                999_999
            };
            std::fs::write(s.dir().join("soak.yaml"), rules(limit)).expect("write rules");
            event = format!("reload {reloads}");
        }
        if restarts < 2 && t >= seconds * (restarts + 1) / 3 {
            restarts += 1;
            redis.restart();
            event = format!("{event} redis restart {restarts}");
        }
        peak_rss = peak_rss.max(rss_kib(s.pid()));
        if t >= next_sample {
            next_sample += 10;
            let (all, sockets) = fds(s.pid());
            let ready: serde_json::Value =
                serde_json::from_str(&s.get("/readyz").1).unwrap_or_default();
            println!(
                "| {t} | {:.1} | {all} | {sockets} | {} | {} | {event} |",
                rss_kib(s.pid()) as f64 / 1024.0,
                ready["config"]["generation"],
                ready["store"]["in_use"].as_str().unwrap_or("?"),
            );
        } else if !event.is_empty() {
            println!("| {t} | | | | | | {event} |");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    peak_rss
}

/// What the honest load saw, what the attacker did, and what sluice
/// counted.
fn report(s: &Sluice, load: &str, tally: &attacker::Tally, peak_rss: u64) {
    let (_, metrics) = s.get("/metrics");
    println!("\nhonest load: {}", load.trim());
    println!(
        "attacker: {} poison requests ({} refused), {} no-read connections carrying {} streams, {} idle connections held at the end; peak RSS {:.1} MiB",
        tally.poison_sent.load(std::sync::atomic::Ordering::Relaxed),
        tally
            .poison_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        tally
            .noread_connections
            .load(std::sync::atomic::Ordering::Relaxed),
        tally
            .noread_streams
            .load(std::sync::atomic::Ordering::Relaxed),
        tally.idle_held.load(std::sync::atomic::Ordering::Relaxed),
        peak_rss as f64 / 1024.0,
    );
    println!(
        "memory counters {}, evictions {}, idle closed {}, store trips {}",
        metric(&metrics, "sluice_memory_counters").unwrap_or(0.0),
        metric(&metrics, "sluice_memory_counter_evictions_total").unwrap_or(0.0),
        metric(&metrics, "sluice_connections_idle_closed_total").unwrap_or(0.0),
        metric(&metrics, "sluice_store_circuit_trips_total").unwrap_or(0.0),
    );
    println!(
        "decided by the failure policy during the Redis gaps: {}; store errors: timeout {}, error {}",
        metric(
            &metrics,
            "sluice_store_policy_decisions_total{policy=\"fallback\"}"
        )
        .unwrap_or(0.0),
        metric(&metrics, "sluice_store_errors_total{kind=\"timeout\"}").unwrap_or(0.0),
        metric(&metrics, "sluice_store_errors_total{kind=\"error\"}").unwrap_or(0.0),
    );
}
