//! Envoys running the shipped `envoy/rlqs.yaml` (rate_limit_quota filter)
//! against a sluice, and clients that flood them at a bounded pace.

use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::redis::free_port;
use super::stack::{spawn_envoy, start_upstream};
use super::{Sluice, eventually, workspace};

/// The demo upstream, shared by a test's Envoys.
pub struct Upstream {
    child: Child,
    pub port: u16,
}

impl Upstream {
    pub fn start() -> Upstream {
        let (child, port) = start_upstream();
        Upstream { child, port }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Partners the tests' Envoys know, each with its name as its key.
pub const TEST_PARTNERS: [&str; 3] = ["acme", "partner-q", "initech"];

/// One Envoy running `envoy/rlqs.yaml` with its addresses rewritten.
pub struct QuotaEnvoy {
    pub port: u16,
    pub admin: u16,
    child: Child,
    dir: tempfile::TempDir,
    agent: ureq::Agent,
}

impl QuotaEnvoy {
    /// Starts Envoy against `sluice`, and returns once it routes requests.
    pub fn start(sluice: &Sluice, upstream: &Upstream) -> QuotaEnvoy {
        QuotaEnvoy::start_with(sluice, upstream, str::to_owned)
    }

    /// As [`QuotaEnvoy::start`], the rendered config passed through `edit`.
    pub fn start_with(
        sluice: &Sluice,
        upstream: &Upstream,
        edit: impl Fn(&str) -> String,
    ) -> QuotaEnvoy {
        let dir = tempfile::tempdir().expect("tempdir");
        let (port, admin) = (free_port(), free_port());
        let config = dir.path().join("rlqs.yaml");
        let ok = Command::new("python3")
            .arg(workspace().join("envoy/stack.py"))
            .arg("render")
            .arg("--config")
            .arg(workspace().join("envoy/rlqs.yaml"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args(["--sluice", &sluice.grpc.to_string()])
            .args(["--upstream", &format!("127.0.0.1:{}", upstream.port)])
            .arg("--out")
            .arg(&config)
            .status()
            .expect("render")
            .success();
        assert!(ok, "render envoy/rlqs.yaml");
        // The tests' partners: each one's key is its name.
        let text = std::fs::read_to_string(&config).expect("rendered");
        let partners: String = TEST_PARTNERS
            .iter()
            .map(|p| format!("\n              - {{key: {p}, client: {p}}}"))
            .collect();
        let text = text.replacen("credentials:", &format!("credentials:{partners}"), 1);
        std::fs::write(&config, edit(&text)).expect("config");
        let child = spawn_envoy(&config, &dir.path().join("envoy.log"));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let envoy = QuotaEnvoy {
            port,
            admin,
            child,
            dir,
            agent,
        };
        let up = eventually(Duration::from_secs(30), || {
            envoy.try_get("/api/health", None).is_some_and(|s| s == 200)
        });
        assert!(up, "envoy did not come up: {}", envoy.log());
        // What the RLQS client receives is logged at debug: the tests read
        // the assignment Envoy holds from it (`held_per_second`).
        let logging = format!("http://127.0.0.1:{admin}/logging?rate_limit_quota=debug");
        let set = envoy.agent.post(logging).send_empty();
        assert!(set.is_ok_and(|r| r.status() == 200), "admin /logging");
        envoy
    }

    /// The rate of the last token bucket sluice assigned this Envoy, as its
    /// log shows it received it: None before any.
    pub fn held_per_second(&self) -> Option<f64> {
        let log = self.log();
        let bucket = &log[log.rfind("token_bucket {")?..];
        let field = |name: &str, inner: &str| -> Option<f64> {
            let rest = &bucket[bucket.find(name)?..];
            let rest = &rest[rest.find(inner)? + inner.len()..];
            let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
            rest[..end].parse().ok()
        };
        let tokens = field("tokens_per_fill {", "value: ")?;
        let seconds = field("fill_interval {", "seconds: ")?;
        Some(tokens / seconds)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    fn try_get(&self, path: &str, key: Option<&str>) -> Option<u16> {
        self.try_get_with(path, key, &[])
    }

    fn try_get_with(&self, path: &str, key: Option<&str>, headers: &[(&str, &str)]) -> Option<u16> {
        let mut req = self
            .agent
            .get(format!("http://127.0.0.1:{}{path}", self.port));
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.call().ok().map(|r| r.status().as_u16())
    }

    /// `n` partner requests with `key` and `headers`, one after another.
    pub fn flood_with(&self, key: &str, headers: &[(&str, &str)], n: usize) -> Tally {
        let tally = Tally::default();
        for _ in 0..n {
            match self.try_get_with("/api/partner/orders", Some(key), headers) {
                Some(200) => tally.ok.fetch_add(1, Relaxed),
                Some(429) => tally.limited.fetch_add(1, Relaxed),
                _ => tally.other.fetch_add(1, Relaxed),
            };
        }
        tally
    }

    /// One partner request with `key`: the status.
    pub fn get(&self, key: &str) -> u16 {
        self.try_get("/api/partner/orders", Some(key))
            .expect("no answer from envoy")
    }

    /// Sends requests with `key` for `run`, at most `per_second` of them
    /// (unpaced when `None`), from `threads` threads; returns (200s, 429s).
    pub fn flood(
        &self,
        key: &str,
        run: Duration,
        per_second: Option<f64>,
        threads: usize,
    ) -> Tally {
        let tally = Tally::default();
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            for t in 0..threads {
                let (tally, stop) = (&tally, stop.clone());
                s.spawn(move || {
                    let start = Instant::now();
                    let gap = per_second.map(|r| Duration::from_secs_f64(threads as f64 / r));
                    // Spread paced threads over the gap.
                    let mut next =
                        start + gap.map_or(Duration::ZERO, |g| g * t as u32 / threads as u32);
                    while start.elapsed() < run && !stop.load(Relaxed) {
                        if let Some(g) = gap {
                            let now = Instant::now();
                            if next > now {
                                std::thread::sleep(next - now);
                            }
                            next += g;
                        }
                        match self.try_get("/api/partner/orders", Some(key)) {
                            Some(200) => tally.ok.fetch_add(1, Relaxed),
                            Some(429) => tally.limited.fetch_add(1, Relaxed),
                            _ => tally.other.fetch_add(1, Relaxed),
                        };
                    }
                });
            }
        });
        tally
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for QuotaEnvoy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a flood got.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: AtomicU64,
    pub limited: AtomicU64,
    pub other: AtomicU64,
}

impl Tally {
    pub fn ok(&self) -> u64 {
        self.ok.load(Relaxed)
    }
    pub fn limited(&self) -> u64 {
        self.limited.load(Relaxed)
    }
    pub fn other(&self) -> u64 {
        self.other.load(Relaxed)
    }
}

/// A rule set for the partner bucket: `n` requests per `window`.
pub fn partner_rules(n: u32, window: &str) -> String {
    format!(
        "domain: api\ndescriptors:\n  - key: tier\n    value: partner\n    descriptors:\n      - key: api_key\n        rate_limit: {{window: {window}, requests_per_unit: {n}}}\n"
    )
}

/// `sluice_quota_*` series of the partner rule.
pub fn quota_metric(sluice: &Sluice, name: &str) -> f64 {
    let text = sluice.get("/metrics").1;
    super::metric(
        &text,
        &format!("{name}{{domain=\"api\",rule=\"tier_partner.api_key\"}}"),
    )
    .unwrap_or(0.0)
}
