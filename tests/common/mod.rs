//! Test harness: starts the real `sluice` binary on free loopback ports and
//! talks to it over gRPC and HTTP.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor,
    rate_limit_descriptor::{Entry, RateLimitOverride},
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

pub mod ads;
pub mod browser;
pub mod fake_redis;
pub mod far;
pub mod flood;
pub mod h2raw;
pub mod memcache;
mod metrics;
pub mod pulse;
pub mod quota;
pub mod redis;
mod rls;
pub mod stack;
pub mod throttle;

// Not every test binary asks over gRPC or reads metrics.
#[allow(unused_imports)]
pub use metrics::*;
#[allow(unused_imports)]
pub use rls::*;

pub const OK: i32 = 1;
pub const OVER: i32 = 2;

/// A running sluice process; killed when dropped.
pub struct Sluice {
    child: Option<Child>,
    pub grpc: SocketAddr,
    /// The gRPC socket's path under `--grpc-uds`.
    pub grpc_uds: Option<PathBuf>,
    pub admin: SocketAddr,
    pub logs: Arc<Mutex<Vec<String>>>,
    _dir: Option<tempfile::TempDir>,
}

/// A config directory holding `files`.
pub fn config_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, text).expect("write config");
    }
    dir
}

/// The binary under test: this build's, or `SLUICE_TEST_BIN` (a release
/// build, to run a load test at full speed by hand).
pub fn sluice_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SLUICE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").into())
    })
}

impl Sluice {
    /// Starts sluice on a directory holding `files`.
    pub fn start(files: &[(&str, &str)], extra: &[&str]) -> Sluice {
        let dir = config_dir(files);
        let mut s = Sluice::start_in(dir.path(), extra);
        s._dir = Some(dir);
        s
    }

    /// Starts sluice on an existing directory and waits until it listens.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Sluice {
        Sluice::start_at(dir, "127.0.0.1:0", extra)
    }

    /// Starts sluice with its gRPC listener on `grpc` (to take over from a
    /// stopped one).
    pub fn start_at(dir: &Path, grpc: &str, extra: &[&str]) -> Sluice {
        Sluice::start_at_env(dir, grpc, extra, &[])
    }

    /// As [`Sluice::start_at`], with environment variables set.
    pub fn start_at_env(dir: &Path, grpc: &str, extra: &[&str], env: &[(&str, &str)]) -> Sluice {
        let mut cmd = Command::new(sluice_bin());
        cmd.envs(env.iter().copied());
        Sluice::spawn(cmd, dir, grpc, extra)
    }

    /// As [`Sluice::start_in`], started by `sh` after `setup` (a `umask`,
    /// a `ulimit`).
    pub fn start_at_env_shell(dir: &Path, setup: &str, extra: &[&str]) -> Sluice {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{setup}; exec \"$0\" \"$@\""))
            .arg(sluice_bin());
        Sluice::spawn(cmd, dir, "127.0.0.1:0", extra)
    }

    fn spawn(mut cmd: Command, dir: &Path, grpc: &str, extra: &[&str]) -> Sluice {
        // Quota mode assigns at once in tests; the test of the learning
        // after a start asks for it.
        if !cmd.get_envs().any(|(k, _)| k == "SLUICE_QUOTA_LEARNING") {
            cmd.env("SLUICE_QUOTA_LEARNING", "0s");
        }
        let mut child = cmd
            .arg("serve")
            .arg("--config")
            .arg(dir)
            .args([
                "--grpc-addr",
                grpc,
                "--admin-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("sluice listening") {
                    let _ = tx.send(line.clone());
                }
                sink.lock().unwrap().push(line);
            }
        });
        // Rules load before sluice listens: 100,000 of them take a debug
        // build some seconds, beside busy loops several times that.
        let line = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("sluice did not start: {:?}", logs.lock().unwrap());
            }
        };
        let v: serde_json::Value = serde_json::from_str(&line).expect("json log");
        let addr = |f: &str| v["fields"][f].as_str().expect(f).parse().expect("addr");
        let grpc = v["fields"]["grpc_addr"].as_str().expect("grpc_addr");
        let grpc_uds = grpc.strip_prefix("unix:").map(PathBuf::from);
        Sluice {
            // A Unix socket has no address: 0.0.0.0:0 stands in.
            grpc: grpc
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
            grpc_uds,
            admin: addr("admin_addr"),
            child: Some(child),
            logs,
            _dir: None,
        }
    }

    /// Keeps `dir` (its rules) until this process is dropped.
    pub fn keep(&mut self, dir: tempfile::TempDir) {
        self._dir = Some(dir);
    }

    pub fn dir(&self) -> &Path {
        self._dir.as_ref().expect("owned dir").path()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect")
    }

    pub fn signal(&self, sig: &str) {
        assert!(send_signal(self.pid(), sig), "kill -{sig} failed");
    }

    /// Waits for the process to exit after a signal.
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "sluice did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs_contain(&self, needle: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// `/readyz` as JSON (null if it does not parse).
    pub fn readyz(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/readyz").1).unwrap_or_default()
    }

    /// `/readyz`'s status: `ready`, `degraded` or `shutting_down`.
    pub fn status(&self) -> String {
        self.readyz()["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(self.admin, "GET", path, "")
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        http(self.admin, "POST", path, body)
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends a signal with the shell's `kill` builtin (no procps needed).
pub fn send_signal(pid: u32, sig: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status()
        .is_ok_and(|s| s.success())
}

/// A minimal HTTP/1.1 exchange: status and body.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    http_with(addr, method, path, &[], body)
}

/// As [`http`], with more request headers.
pub fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// `sluice check DIR`'s outcome.
pub fn sluice_check(dir: &Path) -> std::process::Output {
    Command::new(sluice_bin())
        .arg("check")
        .arg(dir)
        .output()
        .expect("sluice check")
}

/// Polls `f` until it returns true or `within` passes.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a shell script in `dir` and returns its output; fails the test if it fails.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A CA, a certificate it signs for `name` (server or client), and a
/// stranger's self-signed client certificate.
pub fn certificates(dir: &Path) {
    sh(
        dir,
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=sluice-test-ca 2>/dev/null && \
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && \
         for who in server client; do \
           openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who-1 2>/dev/null && \
           openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 2 -extfile san.ext 2>/dev/null; \
         done && \
         openssl req -x509 -newkey rsa:2048 -nodes -keyout stranger.key -out stranger.pem -days 2 -subj /CN=stranger 2>/dev/null",
    );
}

/// libfaketime's preload library (Debian's `faketime`, which `make deps`
/// installs): a process started with it in `LD_PRELOAD` reads a wall clock
/// set by `FAKETIME` or a `FAKETIME_TIMESTAMP_FILE`.
pub fn faketime_lib() -> String {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists());
    found
        .expect("libfaketime (apt: faketime; make deps installs it)")
        .display()
        .to_string()
}
