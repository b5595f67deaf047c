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
use shared::{RULES, grpc_body};

const ROUNDS: usize = 5;
const SECONDS: u64 = 4;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

struct Server {
    name: &'static str,
    addr: SocketAddr,
    /// Processes whose CPU counts for this server (sluice and its Redis).
    pids: Vec<u32>,
}

impl Server {
    fn cpu(&self) -> f64 {
        self.pids.iter().map(|&p| cpu_seconds(p)).sum()
    }
}

/// Throughput from one h2load run, and the server CPU per request.
fn h2load(server: &Server, body: &Path) -> (f64, f64) {
    let cpu = server.cpu();
    let out = shared::h2load(
        &["-t1", "-c8", "-m32", "-D", &SECONDS.to_string()],
        body,
        server.addr,
    )
    .output()
    .expect("h2load (make bench installs nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("finished in "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|r| r.trim_end_matches(" req/s").parse().ok())
        .unwrap_or_else(|| panic!("h2load said: {text}"));
    assert!(
        text.contains(" 0 failed, 0 errored"),
        "h2load errors: {text}"
    );
    let cpu_us = (server.cpu() - cpu) * 1e6 / (rps * SECONDS as f64);
    (rps, cpu_us)
}

/// One `sluice bench --json` run.
fn sluice_bench(addr: SocketAddr, args: &[&str]) -> serde_json::Value {
    let out = Command::new(common::sluice_bin())
        .arg("bench")
        .args(["--target", &addr.to_string(), "--domain", "bench", "--json"])
        .args(args)
        .output()
        .expect("sluice bench");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|_| panic!("sluice bench said: {text}"));
    assert_eq!(v["errors"], 0, "{v}");
    v
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn noop_bin() -> PathBuf {
    let sluice = Path::new(common::sluice_bin());
    let path = sluice
        .parent()
        .expect("target dir")
        .join("examples/noop_rls");
    assert!(
        path.exists(),
        "{} missing: `make bench` builds it",
        path.display()
    );
    path
}

/// The no-op server, killed when dropped (a panicking bench leaves no process).
struct Noop(Child);

impl Drop for Noop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_noop() -> (Noop, SocketAddr) {
    let mut child = Command::new(noop_bin())
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("noop_rls");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("noop address");
    let addr = line
        .trim()
        .trim_start_matches("listening on ")
        .parse()
        .expect("address");
    (Noop(child), addr)
}

fn main() {
    let rounds = env_or("BENCH_ROUNDS", ROUNDS);
    let quiet = ["--log-level", "warn,sluice=info"];
    let (noop, noop_addr) = start_noop();
    let memory = Sluice::start(&[("bench.yaml", RULES)], &quiet);
    let redis = RedisServer::start();
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
    let [noop_s, memory_s, redis_s, unleased_s] = &servers;

    let dir = tempfile::tempdir().expect("tempdir");
    let hot = dir.path().join("hot.bin");
    std::fs::write(&hot, grpc_body(&[&[("hot", "k")]])).expect("write");
    let login = dir.path().join("login.bin");
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
    let slide = dir.path().join("slide.bin");
    std::fs::write(&slide, grpc_body(&[&[("slide", "k")]])).expect("write");
    let tb = dir.path().join("tb.bin");
    std::fs::write(&tb, grpc_body(&[&[("tb", "k")]])).expect("write");

    println!("h2load -t1 -c8 -m32, {SECONDS}s per run, {rounds} interleaved rounds; medians\n");
    let cases: [(&str, &Server, &Path); 10] = [
        ("no-op, 1 descriptor", noop_s, &hot),
        ("memory, 1 descriptor (hot key)", memory_s, &hot),
        ("no-op, 3 descriptors", noop_s, &login),
        ("memory, 3 descriptors (login shape)", memory_s, &login),
        ("redis, 1 descriptor (hot key)", redis_s, &hot),
        (
            "redis, leases off, 1 descriptor (hot key)",
            unleased_s,
            &hot,
        ),
        ("memory, sliding window (hot key)", memory_s, &slide),
        ("memory, token bucket (hot key)", memory_s, &tb),
        ("redis, sliding window (hot key)", redis_s, &slide),
        ("redis, token bucket (hot key)", redis_s, &tb),
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

    // While trying a lever, the throughput table alone is enough.
    if env_or("BENCH_THROUGHPUT_ONLY", 0) == 1 {
        return;
    }
    let duration = format!("{SECONDS}s");
    let fixed = |addr, rate: u32| {
        sluice_bench(
            addr,
            &[
                "--descriptor",
                "hot=k",
                "--rate",
                &rate.to_string(),
                "--duration",
                &duration,
            ],
        )
    };
    // The highest of these rates at which the no-op answers with a p99 under
    // 2 ms on this machine (the client shares its two cores).
    let rate = [20_000, 10_000, 5_000, 2_500]
        .into_iter()
        .find(|&r| {
            let p99 = median(
                (0..rounds)
                    .map(|_| fixed(noop_s.addr, r)["p99_us"].as_f64().unwrap_or(f64::MAX))
                    .collect(),
            );
            println!("  no-op at {r} req/s: p99 {:.2} ms", p99 / 1000.0);
            p99 < 2_000.0
        })
        .unwrap_or(2_500);
    println!(
        "\nsluice bench: fixed {rate} req/s (the no-op's p99 is under 2 ms there) for {SECONDS}s, one hot key; medians of {rounds} rounds\n"
    );
    println!("| server | p50 | p90 | p99 | p99.9 | p99 of no-op's |");
    println!("|---|---|---|---|---|---|");
    let mut lat: Vec<Vec<serde_json::Value>> = vec![Vec::new(); servers.len()];
    for _ in 0..rounds {
        for (i, s) in servers.iter().enumerate() {
            lat[i].push(fixed(s.addr, rate));
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

    println!("\nsluice bench: 100,000 distinct keys, closed loop, {SECONDS}s\n");
    println!("| server | req/s | of no-op | p99 |");
    println!("|---|---|---|---|");
    let mut noop_rps = 0.0;
    for s in [noop_s, memory_s, redis_s, unleased_s] {
        let v = sluice_bench(
            s.addr,
            &[
                "--descriptor",
                "ip=10.{n}",
                "--keys",
                "100000",
                "--duration",
                &duration,
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

    // A hot key far below its limit: with leased allowance, Redis hears
    // about one call per chunk.
    let calls = || redis.calls("evalsha") + redis.calls("eval");
    for s in [redis_s, unleased_s] {
        let before = calls();
        let (n, cpu) =
            on_redis_cpu_per_request(s, &["--descriptor", "hot=k", "--duration", &duration]);
        println!(
            "\n{}: hot key far below its limit, closed loop: {:.1} script calls per 1,000 requests ({n} requests); sluice+redis CPU {cpu:.1} µs/req",
            s.name,
            (calls() - before) as f64 * 1000.0 / n as f64
        );
    }

    // A key over its limit: the local cache answers, Redis hears nothing.
    let allowed_cpu =
        on_redis_cpu_per_request(redis_s, &["--descriptor", "hot=k", "--duration", &duration]);
    let before = calls();
    let flood_cpu = on_redis_cpu_per_request(
        redis_s,
        &["--descriptor", "flood=k", "--duration", &duration],
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
        &["--descriptor", "refund_flood=k", "--duration", &duration],
    );
    println!(
        "over-limit flood on a refundable rule: {} script calls; sluice+redis CPU {:.1} µs/req ({} requests answered)",
        calls() - before,
        refundable_cpu.1,
        refundable_cpu.0
    );

    // A counter lookup (POST /api/counters) on Redis: what an operator's or
    // an application's look costs, one at a time.
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

    // Memory per live key: 1,000,000 distinct keys into a fresh memory store,
    // for each shape.
    // (A bucket is freed once full again: `tbmem` refills slowly, so its
    // million buckets are all still live when memory is read.)
    for key in ["ip", "slide", "tbmem"] {
        memory_per_key(key, &quiet);
    }
    drop(noop);
}

/// RSS per live key after 1,000,000 distinct keys of rule `key`.
fn memory_per_key(key: &str, quiet: &[&str]) {
    let fresh = Sluice::start(&[("bench.yaml", RULES)], quiet);
    let _ = sluice_bench(
        fresh.grpc,
        &[
            "--descriptor",
            &format!("{key}=warm{{n}}"),
            "--keys",
            "1000",
            "--requests",
            "1000",
        ],
    );
    let before = rss_bytes(fresh.pid());
    let started = Instant::now();
    let v = sluice_bench(
        fresh.grpc,
        &[
            "--descriptor",
            &format!("{key}={{n}}"),
            "--keys",
            "1000000",
            "--requests",
            "1000000",
            "--duration",
            "600s",
        ],
    );
    let after = rss_bytes(fresh.pid());
    println!(
        "\nmemory store, rule {key}, 1,000,000 live keys ({} requests in {:.1}s): RSS {} MiB -> {} MiB, {:.0} bytes per key",
        v["requests"],
        started.elapsed().as_secs_f64(),
        before >> 20,
        after >> 20,
        after.saturating_sub(before) as f64 / 1e6
    );
}

/// (requests, CPU µs per request of sluice and Redis) for one closed-loop run.
fn on_redis_cpu_per_request(server: &Server, args: &[&str]) -> (u64, f64) {
    let cpu = server.cpu();
    let v = sluice_bench(server.addr, args);
    let n = v["requests"].as_u64().unwrap_or(1).max(1);
    (n, (server.cpu() - cpu) * 1e6 / n as f64)
}
