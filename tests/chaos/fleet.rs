//! The fleet under test: one store (a redis-server or a memcached, see
//! `store.rs`), and sluice instances that each reach it through a proxy of
//! their own (so one instance can be cut off alone), all reading one rule
//! directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use super::common::throttle::Throttle;
use super::common::{Sluice, config_dir, send_signal};
use super::logs::Logs;
use super::proxy::Proxy;
use super::store::{Backend, Store};
use super::xds::Xds;

pub use super::rules::*;

pub struct Instance {
    pub grpc: SocketAddr,
    pub sluice: Mutex<Option<Sluice>>,
}

pub struct Fleet {
    pub store: Mutex<Store>,
    pub backend: Backend,
    pub proxies: Vec<Proxy>,
    pub instances: Vec<Instance>,
    pub dir: tempfile::TempDir,
    /// Each instance's libfaketime offset file (`+0` until a clock step).
    clocks: tempfile::TempDir,
    args: Vec<String>,
    flood: Mutex<Vec<Child>>,
    /// The store process stopped by the nemesis, to continue.
    stopped: Mutex<Option<u32>>,
    throttle: Mutex<Option<Throttle>>,
    /// The management server, when the rules come over xDS.
    xds: Option<Xds>,
    pub logs: Logs,
}

impl Fleet {
    /// `n` instances on `backend` with `extra` flags (`--key-format
    /// envoyproxy`, ...).
    pub fn start(n: usize, backend: Backend, extra: &[&str]) -> Fleet {
        let store = Store::start(backend);
        let dir = config_dir(&[("chaos.yaml", &rules_text(RULES[0].1, backend))]);
        let mut args: Vec<String> = [
            "--redis-timeout",
            &format!("{STORE_TIMEOUT_MS}ms"),
            "--count-after-credit",
            "20",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let xds = (backend == Backend::Xds).then(|| Xds::start(RULES[0].1));
        if let Some(x) = &xds {
            args.extend(x.flags());
        }
        // Where the fleet is not proxied the proxies carry nothing: the
        // store's flags name its own addresses.
        let proxies: Vec<Proxy> = (0..n).map(|_| store.link()).collect();
        let clocks = tempfile::tempdir().expect("tempdir");
        let logs = Logs::default();
        let instances = proxies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let clock = clocks.path().join(format!("clock-{i}"));
                std::fs::write(&clock, "+0").expect("clock");
                let mut all = store.flags(p);
                all.extend(args.iter().cloned());
                let s = start(dir.path(), "127.0.0.1:0", &all, &clock);
                wait_ready(&s, backend);
                logs.keep(i, &s);
                Instance {
                    grpc: s.grpc,
                    sluice: Mutex::new(Some(s)),
                }
            })
            .collect();
        Fleet {
            store: Mutex::new(store),
            backend,
            proxies,
            instances,
            dir,
            clocks,
            args,
            flood: Mutex::new(Vec::new()),
            stopped: Mutex::new(None),
            throttle: Mutex::new(None),
            xds,
            logs,
        }
    }

    /// Stops the store (its master, on Sentinel) or continues the one
    /// stopped, whichever the Sentinel names master by then.
    pub fn signal_store(&self, sig: &str) {
        let mut stopped = self.stopped.lock().expect("stopped");
        if sig == "STOP" {
            let pid = self.store.lock().expect("store").pid();
            *stopped = Some(pid);
            send_signal(pid, sig);
        } else if let Some(pid) = stopped.take() {
            send_signal(pid, sig);
        }
    }

    /// Throttles the store (its master) as a CPU quota throttles a pod,
    /// stopped 60 ms of every 90, or ends it. A store that answers late is
    /// slow, not down: its late calls are shed, the breaker is never told,
    /// and the count stays exact.
    pub fn throttle_store(&self, on: bool) {
        let pid = on.then(|| self.store.lock().expect("store").pid());
        let (run, stopped) = (Duration::from_millis(30), Duration::from_millis(60));
        let mut throttle = self.throttle.lock().expect("throttle");
        *throttle = None;
        *throttle = pid.map(|pid| Throttle::start(pid, run, stopped));
    }

    /// Takes the xDS server away, or brings it back.
    pub fn xds_gone(&self, on: bool) {
        if let Some(x) = &self.xds {
            x.gone(on);
        }
    }

    /// A failover without a failure, where the store has replicas.
    pub fn failover(&self, pick: usize) {
        self.store.lock().expect("store").failover(pick);
    }

    /// Slots moved between Cluster masters under load: how many.
    pub fn migrate(&self, pick: usize) -> usize {
        self.store.lock().expect("store").migrate(pick)
    }

    pub fn kill_store(&self) {
        self.store.lock().expect("store").kill();
    }

    pub fn restart_store(&self) {
        self.store.lock().expect("store").restart();
    }

    pub fn signal_instance(&self, i: usize, sig: &str) {
        if let Some(s) = self.instances[i].sluice.lock().expect("instance").as_ref() {
            send_signal(s.pid(), sig);
        }
    }

    pub fn kill_instance(&self, i: usize) {
        // Dropping the process handle kills it (SIGKILL) and reaps it.
        self.instances[i].sluice.lock().expect("instance").take();
    }

    /// Starts instance `i` again on its gRPC address.
    pub fn restart_instance(&self, i: usize) {
        let inst = &self.instances[i];
        let mut all = self.store.lock().expect("store").flags(&self.proxies[i]);
        all.extend(self.args.iter().cloned());
        let s = start(
            self.dir.path(),
            &inst.grpc.to_string(),
            &all,
            &self.clock(i),
        );
        self.logs.keep(i, &s);
        *inst.sluice.lock().expect("instance") = Some(s);
    }

    fn clock(&self, i: usize) -> PathBuf {
        self.clocks.path().join(format!("clock-{i}"))
    }

    /// Sets instance `i`'s wall clock `ms` ahead of the host's (behind when
    /// negative); libfaketime reads it within a second.
    pub fn step_clock(&self, i: usize, ms: i64) {
        let sign = if ms < 0 { '-' } else { '+' };
        let (s, frac) = (ms.abs() / 1000, ms.abs() % 1000);
        std::fs::write(self.clock(i), format!("{sign}{s}.{frac:03}")).expect("clock");
    }

    /// Every instance's log, as `<prefix>-instance-<i>-<n>.log`.
    pub fn save_logs(&self, prefix: &Path) {
        self.logs.save(prefix);
    }

    /// Each instance's admin address, while it runs.
    pub fn admins(&self) -> Vec<Option<SocketAddr>> {
        self.instances
            .iter()
            .map(|i| i.sluice.lock().expect("instance").as_ref().map(|s| s.admin))
            .collect()
    }

    /// Two busy loops beside the fleet, as many as this host has cores.
    pub fn flood(&self, on: bool) {
        let mut flood = self.flood.lock().expect("flood");
        for mut c in flood.drain(..) {
            let _ = (c.kill(), c.wait());
        }
        if on {
            for _ in 0..2 {
                if let Ok(c) = Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                {
                    flood.push(c);
                }
            }
        }
    }

    /// h2load against every instance, far past what this host can answer
    /// (16 connections x 64 streams each), on the flood's own counter.
    pub fn request_flood(&self, on: bool) {
        let mut flood = self.flood.lock().expect("flood");
        for mut c in flood.drain(..) {
            let _ = (c.kill(), c.wait());
        }
        if !on {
            return;
        }
        let req =
            super::common::request("chaos", vec![super::common::descriptor(&[("flood", "x")])]);
        let body = super::common::grpc_frame(&req);
        let file = self.dir.path().join(".flood.bin");
        std::fs::write(&file, body).expect("body");
        for i in &self.instances {
            flood.extend(h2load(&file, i.grpc));
        }
    }

    /// Rewrites the rules with `a`'s limit at `limit`; every instance
    /// reloads them.
    pub fn reload(&self, limit: u32) {
        if let Some(x) = &self.xds {
            return x.push(limit);
        }
        std::fs::write(
            self.dir.path().join("chaos.yaml"),
            rules_text(limit, self.backend),
        )
        .expect("rules");
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.flood(false);
        for p in &self.proxies {
            p.pass();
        }
        if let Ok(r) = self.store.lock() {
            r.continue_all();
        }
        for i in &self.instances {
            if let Ok(s) = i.sluice.lock()
                && let Some(s) = s.as_ref()
            {
                send_signal(s.pid(), "CONT");
            }
        }
    }
}

/// Waits for an instance to be ready, and on xDS for the pushed rules to be
/// shown.
fn wait_ready(s: &Sluice, backend: Backend) {
    let ready =
        super::common::eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready");
    assert!(ready, "instance never ready: {}", s.readyz());
    if backend == Backend::Xds {
        // The pushed rules, shaped by the overlay. Readiness is the
        // store's: the first push may land after it.
        let pushed = super::common::eventually(Duration::from_secs(30), || {
            let (_, rl) = s.get("/rlconfig");
            rl.contains("algorithm=sliding_window") && rl.contains("chaos.c: window=2s")
        });
        assert!(pushed, "pushed rules never shown: {}", s.get("/rlconfig").1);
    }
}

/// An instance whose wall clock is the host's plus what `clock` says
/// (libfaketime, read again every second; its monotonic clock is the
/// host's, as NTP and `date` leave it).
fn start(dir: &Path, grpc: &str, args: &[String], clock: &Path) -> Sluice {
    let all: Vec<&str> = args.iter().map(String::as_str).collect();
    let lib = super::common::faketime_lib();
    let file = clock.display().to_string();
    Sluice::start_at_env(
        dir,
        grpc,
        &all,
        &[
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
            ("FAKETIME_CACHE_DURATION", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
}

/// h2load at `grpc`, 16 connections x 64 streams, sending `body` for 60 s.
fn h2load(body: &Path, grpc: SocketAddr) -> Option<Child> {
    const ARGS: &str =
        "-n 100000000 -c 16 -m 64 -t 1 -D 60 -H content-type:application/grpc -H te:trailers -d";
    let rls = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    Command::new("h2load")
        .args(ARGS.split(' '))
        .arg(body)
        .arg(format!("http://{grpc}/{rls}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}
