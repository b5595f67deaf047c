//! `make bench`: sluice against the ceiling of this machine, side by side.
//!
//! Three servers on free loopback ports: a no-op rate-limit service on the
//! same tonic stack (`examples/noop_rls.rs`, the ceiling), sluice counting in
//! memory, and sluice counting in a fresh redis-server. Throughput comes from
//! h2load (one thread, 8 connections x 32 streams), the cases interleaved over
//! several rounds and reported as medians, so a noisy neighbour hits every
//! server alike. Fixed-rate latency, many keys, the over-limit flood and
//! memory per key come from `sluice bench`. Client and servers share this
//! machine: read ratios, not capacities.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/proc.rs"]
mod proc;
#[path = "load/servers.rs"]
mod servers;
#[path = "support/shared.rs"]
mod shared;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::{Sluice, eventually};
use proc::cpu_seconds;
use servers::*;
use shared::{RULES, grpc_body};

const ROUNDS: usize = 5;
const SECONDS: u64 = 4;

fn main() {
    let rounds = env_or("BENCH_ROUNDS", ROUNDS);
    let quiet = ["--log-level", "warn,sluice=info"];
    let (noop, noop_addr) = start_noop();
    let memory = Sluice::start(&[("bench.yaml", RULES)], &quiet);
    let redis = RedisServer::start();
    let (on_redis, unleased) = on_redis(&redis);
    let redis_pid = redis.pid();
    let servers = [
        Server {
            name: "no-op",
            addr: noop_addr,
            pids: vec![noop.0.id()],
        },
        Server {
            name: "memory",
            addr: memory.grpc,
            pids: vec![memory.pid()],
        },
        Server {
            name: "redis",
            addr: on_redis.grpc,
            pids: vec![on_redis.pid(), redis_pid],
        },
        Server {
            name: "redis, leases off",
            addr: unleased.grpc,
            pids: vec![unleased.pid(), redis_pid],
        },
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    throughput(&servers, &Bodies::write(dir.path()), rounds);
    // While trying a lever, the throughput table alone is enough.
    if env_or("BENCH_THROUGHPUT_ONLY", 0) == 1 {
        return;
    }
    let duration = format!("{SECONDS}s");
    fixed_rate_latency(&servers, rounds, &duration);
    distinct_keys(&servers, &duration);
    redis_calls(&redis, &servers, &duration);
    lookups(&on_redis, &servers[2]);
    // Memory per live key: 1,000,000 distinct keys into a fresh memory store,
    // for each shape.
    // (A bucket is freed once full again: `tbmem` refills slowly, so its
    // million buckets are all still live when memory is read.)
    for key in ["ip", "slide", "tbmem"] {
        memory_per_key(key, &quiet);
    }
    drop(noop);
}

/// sluice on `redis`, and on the same Redis with every request asking it
/// (leased allowance off), both ready.
fn on_redis(redis: &RedisServer) -> (Sluice, Sluice) {
    let on_redis = Sluice::start(
        &[("bench.yaml", RULES)],
        &[
            "--log-level",
            "warn,sluice=info",
            "--redis-url",
            &redis.url(),
        ],
    );
    // The same Redis, every request asking it: leased allowance off.
    let unleased = Sluice::start(
        &[("bench.yaml", RULES)],
        &[
            "--log-level",
            "warn,sluice=info",
            "--redis-url",
            &redis.url(),
            "--leased-allowance",
            "false",
        ],
    );
    for s in [&on_redis, &unleased] {
        assert!(eventually(Duration::from_secs(10), || s
            .get("/readyz")
            .1
            .contains("\"ready\"")));
    }
    (on_redis, unleased)
}

/// The request bodies h2load sends: one hot key, the login shape's three
/// descriptors, a sliding window and a token bucket.
struct Bodies {
    hot: PathBuf,
    login: PathBuf,
    slide: PathBuf,
    tb: PathBuf,
}

impl Bodies {
    fn write(dir: &Path) -> Bodies {
        let hot = dir.join("hot.bin");
        std::fs::write(&hot, grpc_body(&[&[("hot", "k")]])).expect("write");
        let login = dir.join("login.bin");
        std::fs::write(
            &login,
            grpc_body(&[
                &[("ip", "10.1.2.3")],
                &[
                    ("tier", "credentials"),
                    ("ip", "10.1.2.3"),
                    ("path", "/api/auth/login"),
                ],
                &[("hot", "k")],
            ]),
        )
        .expect("write");
        let slide = dir.join("slide.bin");
        std::fs::write(&slide, grpc_body(&[&[("slide", "k")]])).expect("write");
        let tb = dir.join("tb.bin");
        std::fs::write(&tb, grpc_body(&[&[("tb", "k")]])).expect("write");
        Bodies {
            hot,
            login,
            slide,
            tb,
        }
    }
}

/// h2load's throughput and server CPU for each case, interleaved over
/// `rounds`; medians.
fn throughput(servers: &[Server; 4], bodies: &Bodies, rounds: usize) {
    let [noop_s, memory_s, redis_s, unleased_s] = servers;
    let Bodies {
        hot,
        login,
        slide,
        tb,
    } = bodies;
    println!("h2load -t1 -c8 -m32, {SECONDS}s per run, {rounds} interleaved rounds; medians\n");
    let cases: [(&str, &Server, &Path); 10] = [
        ("no-op, 1 descriptor", noop_s, hot),
        ("memory, 1 descriptor (hot key)", memory_s, hot),
        ("no-op, 3 descriptors", noop_s, login),
        ("memory, 3 descriptors (login shape)", memory_s, login),
        ("redis, 1 descriptor (hot key)", redis_s, hot),
        ("redis, leases off, 1 descriptor (hot key)", unleased_s, hot),
        ("memory, sliding window (hot key)", memory_s, slide),
        ("memory, token bucket (hot key)", memory_s, tb),
        ("redis, sliding window (hot key)", redis_s, slide),
        ("redis, token bucket (hot key)", redis_s, tb),
    ];
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (i, (_, server, body)) in cases.iter().enumerate() {
            runs[i].push(h2load(server, body));
        }
    }
    let rps: Vec<f64> = runs
        .iter()
        .map(|r| median(r.iter().map(|x| x.0).collect()))
        .collect();
    let cpu: Vec<f64> = runs
        .iter()
        .map(|r| median(r.iter().map(|x| x.1).collect()))
        .collect();
    println!("| case | req/s | of no-op (shapes: of the fixed window) | server CPU µs/req |");
    println!("|---|---|---|---|");
    // Shapes are compared with the fixed window on the same store.
    let ceiling = [0, 0, 2, 2, 0, 0, 1, 1, 4, 4];
    for (i, (name, _, _)) in cases.iter().enumerate() {
        println!(
            "| {name} | {:.0} | {:.2} | {:.1} |",
            rps[i],
            rps[i] / rps[ceiling[i]],
            cpu[i]
        );
    }
}

/// One `sluice bench` run at `rate` requests a second on one hot key.
fn fixed(addr: SocketAddr, rate: u32, duration: &str) -> serde_json::Value {
    sluice_bench(
        addr,
        &[
            "--descriptor",
            "hot=k",
            "--rate",
            &rate.to_string(),
            "--duration",
            duration,
        ],
    )
}

/// The highest of these rates at which the no-op answers with a p99 under
/// 2 ms on this machine (the client shares its two cores).
fn quiet_rate(noop: SocketAddr, rounds: usize, duration: &str) -> u32 {
    [20_000, 10_000, 5_000, 2_500]
        .into_iter()
        .find(|&r| {
            let p99 = median(
                (0..rounds)
                    .map(|_| {
                        fixed(noop, r, duration)["p99_us"]
                            .as_f64()
                            .unwrap_or(f64::MAX)
                    })
                    .collect(),
            );
            println!("  no-op at {r} req/s: p99 {:.2} ms", p99 / 1000.0);
            p99 < 2_000.0
        })
        .unwrap_or(2_500)
}

/// p50 to p99.9 at the highest fixed rate the no-op answers within 2 ms.
fn fixed_rate_latency(servers: &[Server; 4], rounds: usize, duration: &str) {
    let noop_s = &servers[0];
    let rate = quiet_rate(noop_s.addr, rounds, duration);
    println!(
        "\nsluice bench: fixed {rate} req/s (the no-op's p99 is under 2 ms there) for {SECONDS}s, one hot key; medians of {rounds} rounds\n"
    );
    println!("| server | p50 | p90 | p99 | p99.9 | p99 of no-op's |");
    println!("|---|---|---|---|---|---|");
    let mut lat: Vec<Vec<serde_json::Value>> = vec![Vec::new(); servers.len()];
    for _ in 0..rounds {
        for (i, s) in servers.iter().enumerate() {
            lat[i].push(fixed(s.addr, rate, duration));
        }
    }
    let p99 = |runs: &Vec<serde_json::Value>| {
        median(
            runs.iter()
                .map(|v| v["p99_us"].as_f64().unwrap_or(0.0))
                .collect(),
        )
    };
    let noop_p99 = p99(&lat[0]);
    for (s, runs) in servers.iter().zip(&lat) {
        let m =
            |f: &str| median(runs.iter().map(|v| v[f].as_f64().unwrap_or(0.0)).collect()) / 1000.0;
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2}x |",
            s.name,
            m("p50_us"),
            m("p90_us"),
            m("p99_us"),
            m("p999_us"),
            p99(runs) / noop_p99
        );
    }
}

/// 100,000 distinct keys, closed loop, on each server.
fn distinct_keys(servers: &[Server; 4], duration: &str) {
    println!("\nsluice bench: 100,000 distinct keys, closed loop, {SECONDS}s\n");
    println!("| server | req/s | of no-op | p99 |");
    println!("|---|---|---|---|");
    let mut noop_rps = 0.0;
    for s in servers {
        let v = sluice_bench(
            s.addr,
            &[
                "--descriptor",
                "ip=10.{n}",
                "--keys",
                "100000",
                "--duration",
                duration,
            ],
        );
        let rps = v["rps"].as_f64().unwrap_or(0.0);
        if noop_rps == 0.0 {
            noop_rps = rps;
        }
        println!(
            "| {} | {rps:.0} | {:.2} | {:.2} ms |",
            s.name,
            rps / noop_rps,
            v["p99_us"].as_f64().unwrap_or(0.0) / 1000.0
        );
    }
}

/// What Redis hears: a hot key far below its limit (leased allowance on and
/// off), and an over-limit flood on a plain and on a refundable rule.
fn redis_calls(redis: &RedisServer, servers: &[Server; 4], duration: &str) {
    let [_, _, redis_s, unleased_s] = servers;
    // A hot key far below its limit: with leased allowance, Redis hears
    // about one call per chunk.
    let calls = || redis.calls("evalsha") + redis.calls("eval");
    for s in [redis_s, unleased_s] {
        let before = calls();
        let (n, cpu) =
            on_redis_cpu_per_request(s, &["--descriptor", "hot=k", "--duration", duration]);
        println!(
            "\n{}: hot key far below its limit, closed loop: {:.1} script calls per 1,000 requests ({n} requests); sluice+redis CPU {cpu:.1} µs/req",
            s.name,
            (calls() - before) as f64 * 1000.0 / n as f64
        );
    }

    // A key over its limit: the local cache answers, Redis hears nothing.
    let allowed_cpu =
        on_redis_cpu_per_request(redis_s, &["--descriptor", "hot=k", "--duration", duration]);
    let before = calls();
    let flood_cpu = on_redis_cpu_per_request(
        redis_s,
        &["--descriptor", "flood=k", "--duration", duration],
    );
    println!(
        "\nover-limit flood on Redis: {} script calls after the first 10 requests' window; sluice+redis CPU {:.1} µs/req (allowed requests: {:.1} µs/req)",
        calls() - before,
        flood_cpu.1,
        allowed_cpu.1
    );
    println!("  ({} flood requests answered)", flood_cpu.0);
    // The same flood on a refundable rule: never answered from the cache, so
    // a refund anywhere is seen at once; every refusal asks Redis.
    let before = calls();
    let refundable_cpu = on_redis_cpu_per_request(
        redis_s,
        &["--descriptor", "refund_flood=k", "--duration", duration],
    );
    println!(
        "over-limit flood on a refundable rule: {} script calls; sluice+redis CPU {:.1} µs/req ({} requests answered)",
        calls() - before,
        refundable_cpu.1,
        refundable_cpu.0
    );
}

/// A counter lookup (POST /api/counters) on Redis: what an operator's or an
/// application's look costs, one at a time.
fn lookups(on_redis: &Sluice, redis_s: &Server) {
    let lookups = 500;
    let body = r#"{"domain":"bench","descriptors":[{"entries":[{"key":"flood","value":"k"}]}]}"#;
    let cpu = redis_s.cpu();
    let started = Instant::now();
    for _ in 0..lookups {
        assert_eq!(on_redis.post("/api/counters", body).0, 200);
    }
    println!(
        "counter lookup on Redis: {:.0} µs each, one at a time; sluice+redis CPU {:.1} µs per lookup",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(lookups),
        (redis_s.cpu() - cpu) * 1e6 / f64::from(lookups)
    );
}
