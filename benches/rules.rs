//! `make bench` (rules): per-customer rules at a platform's scale, as a
//! billing system generates them (`key: api_key`, `value: cust<N>`, each
//! customer's own `requests_per_unit`), in one file. For each size: how long
//! `sluice check` takes and its peak memory, how long `sluice serve` takes
//! to answer and what it holds, its throughput against the 10-rule case
//! (each request one of 100,000 customers' values, found by its exact value
//! or, past the rules, by the key-only default), and
//! the p99 at a fixed rate while the whole set reloads, against the same
//! rate with no reload (the median of three of each, taken in turn), and
//! the slowest of the three reloads to be seen. Each timed run lasts as
//! long as one reload takes to be seen (measured first, untimed) and a
//! second more, so a reload run spans the whole reload; each quiet run
//! starts four seconds after the last reload was seen, once the replaced
//! rules are freed and the table walked for series gone, and asks
//! `/readyz` as often and as long as a reload run does.
//! `RULES_SIZES=10,10000` to choose the sizes, `RULES_FLAGS` to add flags
//! to `sluice serve` (`--reload-nice 20`), `RULES_ROUNDS` for more than
//! three of each.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/shared.rs"]
mod shared;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sluice, workspace};
use shared::customers;

fn release_bin() -> String {
    workspace()
        .join("target/release/sluice")
        .display()
        .to_string()
}

/// Peak resident memory of `pid` so far, in bytes (`VmHWM`).
fn peak(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    field("VmHWM:").max(field("VmRSS:"))
}

/// `sluice check` on `dir`: seconds and peak memory.
fn check(dir: &Path) -> (f64, u64) {
    let started = Instant::now();
    let mut child = Command::new(release_bin())
        .arg("check")
        .args(["--max-rule-file-nodes", "100000000"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("check");
    let mut high = 0;
    loop {
        high = high.max(peak(child.id()));
        if let Ok(Some(status)) = child.try_wait() {
            assert!(status.success(), "check failed on {}", dir.display());
            return (started.elapsed().as_secs_f64(), high);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `sluice bench` against `s` on `keys` customers: its JSON line.
fn bench(s: &Sluice, keys: usize, rate: Option<u32>, secs: u64) -> serde_json::Value {
    let mut c = Command::new(release_bin());
    c.args([
        "bench",
        "--json",
        "--domain",
        "saas",
        "--descriptor",
        "api_key=cust{n}",
    ])
    .args(["--target", &s.grpc.to_string(), "--keys", &keys.to_string()])
    .args(["--duration", &format!("{secs}s")]);
    if let Some(r) = rate {
        c.args(["--rate", &r.to_string()]);
    }
    let out = c.output().expect("bench");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

struct Row {
    rules: usize,
    check_s: f64,
    check_mb: f64,
    ready_s: f64,
    rss_mb: f64,
    rps: f64,
    p99_ms: f64,
    reload_p99_ms: f64,
    reload_s: f64,
}

fn one(n: usize) -> Row {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("customers.yaml");
    std::fs::write(&file, customers(n, 0)).expect("rules");
    let (check_s, check_peak) = check(dir.path());
    let started = Instant::now();
    let extra = std::env::var("RULES_FLAGS").unwrap_or_default();
    let mut flags = vec!["--max-rule-file-nodes", "100000000"];
    flags.extend(extra.split_whitespace());
    let s = Sluice::start_in(dir.path(), &flags);
    let ready_s = started.elapsed().as_secs_f64();
    let rss = peak(s.pid());
    // The same 100,000 customers at every size.
    let keys = 100_000;
    let _ = bench(&s, keys, None, 1);
    // The median of three: one 4 s run on a shared 2-core host reads
    // anywhere within about 10%.
    let mut runs: Vec<f64> = (0..3)
        .map(|_| bench(&s, keys, None, 4)["rps"].as_f64().unwrap_or(0.0))
        .collect();
    let rps = median(&mut runs);
    let (quiet, during, reload_s) = reload_p99s(&s, &file, n, keys);
    Row {
        rules: n,
        check_s,
        check_mb: check_peak as f64 / 1e6,
        ready_s,
        rss_mb: rss as f64 / 1e6,
        rps,
        p99_ms: quiet / 1000.0,
        reload_p99_ms: during / 1000.0,
        reload_s,
    }
}

/// The rules' generation `/readyz` reports.
fn generation(admin: std::net::SocketAddr) -> u64 {
    let (_, body) = common::http(admin, "GET", "/readyz", "");
    serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()["config"]["generation"]
        .as_u64()
        .unwrap_or(0)
}

/// The p99 at 2,000 requests a second with no reload and while the whole
/// set of `n` rules is rewritten and reloaded, each the median of three
/// taken in turn, and the slowest reload to be seen (s).
fn reload_p99s(s: &Sluice, file: &Path, n: usize, keys: usize) -> (f64, f64, f64) {
    // The same rate with no reload, then while the whole set is rewritten
    // and reloaded, three times in turn (`RULES_ROUNDS`): each p99 is the
    // median of its runs (one 4 s run on a shared 2-core host is noisy).
    let generation = || generation(s.admin);
    // Both versions are generated before any measurement, so the writer
    // only writes while requests are timed.
    let versions = [customers(n, 1), customers(n, 0)];
    let reload = |version: &str| {
        let before = generation();
        std::fs::write(file, version).expect("rules");
        let written = Instant::now();
        common::eventually(Duration::from_secs(120), || generation() > before);
        written.elapsed().as_secs_f64()
    };
    // One reload untimed, to know how long a timed run must last.
    let secs = reload(&versions[0]).ceil() as u64 + 1;
    // A quiet run starts once the last reload's wake has passed: the old
    // snapshot freed at the lowest priority, then the rule table walked for
    // series gone on the three seconds after (`server/prune.rs`).
    let settle = || std::thread::sleep(Duration::from_secs(4));
    let timed = || {
        bench(s, keys, Some(2_000), secs.max(4))["p99_us"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let (mut quiet, mut during, mut reload_s) = (Vec::new(), Vec::new(), 0.0f64);
    // A quiet run asks `/readyz` as a reload run does while it waits for
    // the new rules (every 20 ms, for as long as the last reload took), so
    // the two differ only by the reload.
    let mut last_seen = secs.saturating_sub(1) as f64;
    for version in versions.iter().cycle().skip(1).take(rounds()) {
        settle();
        let p99 = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(500));
                let until = Instant::now() + Duration::from_secs_f64(last_seen);
                common::eventually(Duration::from_secs(120), || {
                    generation();
                    Instant::now() >= until
                });
            });
            timed()
        });
        quiet.push(p99);
        let seen = std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(500));
                reload(version)
            });
            during.push(timed());
            writer.join().expect("writer")
        });
        reload_s = reload_s.max(seen);
        last_seen = seen;
    }
    let (quiet, during) = (median(&mut quiet), median(&mut during));
    (quiet, during, reload_s)
}

/// How many quiet and reload runs each (`RULES_ROUNDS`, 3 by default).
fn rounds() -> usize {
    std::env::var("RULES_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let sizes: Vec<usize> = std::env::var("RULES_SIZES")
        .unwrap_or_else(|_| "10,10000,100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rows: Vec<Row> = sizes.into_iter().map(one).collect();
    let base = rows.first().map_or(1.0, |r| r.rps.max(1.0));
    println!(
        "\n| rules | check | check peak | serve ready | serve RSS | req/s | vs first | p99 at 2,000/s | p99 while reloading | vs no reload | reload seen within |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.2} s | {:.0} MB | {:.2} s | {:.0} MB | {:.0} | {:.2} | {:.2} ms | {:.2} ms | {:.2} | {:.1} s |",
            r.rules,
            r.check_s,
            r.check_mb,
            r.ready_s,
            r.rss_mb,
            r.rps,
            r.rps / base,
            r.p99_ms,
            r.reload_p99_ms,
            r.reload_p99_ms / r.p99_ms.max(0.001),
            r.reload_s
        );
    }
}
