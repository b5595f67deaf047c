//! The servers under test and the clients that load them: the no-op, h2load, sluice bench, and what a process costs.

use super::*;

pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

pub(crate) struct Server {
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    /// Processes whose CPU counts for this server (sluice and its Redis).
    pub(crate) pids: Vec<u32>,
}

/// Throughput from one h2load run, and the server CPU per request.
pub(crate) fn h2load(server: &Server, body: &Path) -> (f64, f64) {
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
pub(crate) fn sluice_bench(addr: SocketAddr, args: &[&str]) -> serde_json::Value {
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

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

pub(crate) fn noop_bin() -> PathBuf {
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
pub(crate) struct Noop(pub(crate) Child);

pub(crate) fn start_noop() -> (Noop, SocketAddr) {
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

/// RSS per live key after 1,000,000 distinct keys of rule `key`.
pub(crate) fn memory_per_key(key: &str, quiet: &[&str]) {
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
pub(crate) fn on_redis_cpu_per_request(server: &Server, args: &[&str]) -> (u64, f64) {
    let cpu = server.cpu();
    let v = sluice_bench(server.addr, args);
    let n = v["requests"].as_u64().unwrap_or(1).max(1);
    (n, (server.cpu() - cpu) * 1e6 / n as f64)
}

impl Server {
    pub(crate) fn cpu(&self) -> f64 {
        self.pids.iter().map(|&p| cpu_seconds(p)).sum()
    }
}

impl Drop for Noop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
