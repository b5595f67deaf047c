//! `make instructions`: instructions per request, counted by callgrind, for
//! the no-op ceiling and sluice side by side. Wall-clock numbers swing by a
//! tenth on a shared 2-core machine; instruction counts repeat to within a
//! fraction of a percent, so each speed lever is confirmed here.
//!
//! Each server runs under `valgrind --tool=callgrind`; h2load warms it with
//! 2,000 requests, the counters are zeroed (`callgrind_control -z`), h2load
//! sends `INSTRUCTIONS_REQUESTS` (20,000) more, and the dump is read. The
//! count covers everything the server's threads executed in that time
//! (h2, hyper, tonic, tokio, the allocator, sluice), not the kernel.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/shared.rs"]
mod shared;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::redis::free_port;
use shared::{RULES, customers, grpc_body};

fn body(dir: &Path, name: &str, descriptors: &[&[(&str, &str)]]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, grpc_body(descriptors)).expect("body");
    path
}

fn h2load(port: u16, body: &Path, n: u64) {
    let out = shared::h2load(
        &["-t1", "-c8", "-m32", "-n", &n.to_string()],
        body,
        format!("127.0.0.1:{port}"),
    )
    .output()
    .expect("h2load (make bench installs nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{n} succeeded")), "h2load: {text}");
}

/// Instructions per request of the server `args` starts (`{port}` replaced).
fn count(dir: &Path, name: &str, args: &[String], body: &Path, n: u64) -> f64 {
    let port = free_port();
    let out = dir.join(format!("callgrind.{name}"));
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect();
    let mut child: Child = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("valgrind (apt install valgrind)");
    // Loading 100,000 rules under callgrind takes a minute or two.
    let up = common::eventually(Duration::from_secs(600), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "{name} did not start under valgrind");
    h2load(port, body, 2_000);
    let pid = child.id().to_string();
    let control = |flag: &str| {
        let ok = Command::new("callgrind_control")
            .args([flag, &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("callgrind_control")
            .success();
        assert!(ok, "callgrind_control {flag}");
    };
    control("-z");
    h2load(port, body, n);
    control("-d");
    let _ = child.kill();
    let _ = child.wait();
    // The dump after zeroing is part 1.
    let dump = std::fs::read_to_string(format!("{}.1", out.display())).expect("callgrind dump");
    let total: f64 = dump
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("summary line");
    total / n as f64
}

fn main() {
    let n: u64 = std::env::var("INSTRUCTIONS_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.yaml"), RULES).expect("rules");
    let root = common::workspace().join("target/release");
    let noop = vec![
        root.join("examples/noop_rls").display().to_string(),
        "127.0.0.1:{port}".into(),
    ];
    let sluice = vec![
        root.join("sluice").display().to_string(),
        "--config".into(),
        dir.path().display().to_string(),
        "--grpc-addr".into(),
        "127.0.0.1:{port}".into(),
        "--admin-addr".into(),
        "127.0.0.1:0".into(),
        "--log-level".into(),
        "warn".into(),
    ];
    let one = body(dir.path(), "one", &[&[("hot", "1")]]);
    let three = body(
        dir.path(),
        "three",
        &[
            &[("ip", "10.1.2.3")],
            &[
                ("tier", "credentials"),
                ("ip", "10.1.2.3"),
                ("path", "/api/auth/login"),
            ],
            &[("hot", "u7")],
        ],
    );
    let bucket = body(dir.path(), "bucket", &[&[("tb", "k")]]);
    let sliding = body(dir.path(), "sliding", &[&[("slide", "k")]]);
    println!("callgrind, {n} requests after 2,000 to warm up; instructions per request\n");
    println!("| case | no-op | sluice (memory) | no-op / sluice |");
    println!("|---|---|---|---|");
    let cases = [
        ("1 descriptor (hot key)", &one),
        ("3 descriptors", &three),
        ("token bucket (hot key)", &bucket),
        ("sliding window (hot key)", &sliding),
    ];
    let mut hot_noop = None;
    for (case, b) in cases {
        let a = count(dir.path(), "noop", &noop, b, n);
        hot_noop.get_or_insert(a);
        let s = count(dir.path(), "sluice", &sluice, b, n);
        println!("| {case} | {a:.0} | {s:.0} | {:.3} |", a / s);
    }
    on_redis(dir.path(), &sluice, &one, hot_noop.unwrap_or(0.0), n);
    by_rule_count(dir.path(), &sluice, n);
}

/// The hot key on one Redis with leased allowance on (the default fleet's
/// store): answered from chunks of its limit, the usage levels read from
/// the chunks as counted.
fn on_redis(dir: &Path, sluice: &[String], body: &Path, noop: f64, n: u64) {
    let redis = common::redis::RedisServer::start();
    let mut args = sluice.to_vec();
    args.extend(["--redis-url".into(), redis.url()]);
    let s = count(dir, "redis", &args, body, n);
    println!(
        "| 1 descriptor (hot key), Redis, leases on | {noop:.0} | {s:.0} | {:.3} |",
        noop / s
    );
}

/// The matcher's cost against the rule count: one per-customer value
/// (a rule at every size) among 10 and among `INSTRUCTIONS_RULES`
/// (100,000) generated rules. A million load too slowly under callgrind.
fn by_rule_count(dir: &Path, sluice: &[String], n: u64) {
    let most: usize = std::env::var("INSTRUCTIONS_RULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let b = body(dir, "customer", &[&[("api_key", "cust7")]]);
    println!("\n| per-customer rules | sluice (memory) | against 10 rules |");
    println!("|---|---|---|");
    let mut first = None;
    for rules in [10, most] {
        let config = dir.join(format!("customers-{rules}"));
        std::fs::create_dir_all(&config).expect("config dir");
        // The domain every bench request names.
        let text = customers(rules, 0).replacen("domain: saas", "domain: bench", 1);
        std::fs::write(config.join("saas.yaml"), text).expect("rules");
        let args: Vec<String> = sluice
            .iter()
            .map(|a| {
                if a == &dir.display().to_string() {
                    config.display().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        let s = count(dir, "rules", &args, &b, n);
        let base = *first.get_or_insert(s);
        println!("| {rules} | {s:.0} | {:.3} |", s / base);
    }
}
