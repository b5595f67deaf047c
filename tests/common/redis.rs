//! Real redis-server processes on free loopback ports, for the Redis tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, send_signal};

mod cluster;
mod delay;
mod sentinel;

// Not every test binary starts each of these.
#[allow(unused_imports)]
pub use cluster::RedisCluster;
#[allow(unused_imports)]
pub use delay::DelayProxy;
#[allow(unused_imports)]
pub use sentinel::RedisSentinel;

/// One redis-server; killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    cluster: bool,
}

/// A port for a cluster node: its bus port (port + 10000) must be free and
/// valid too.
pub fn free_cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// A port nobody listens on right now, and that nobody else in this test
/// process is handed. Taken below the kernel's ephemeral range (32768 and
/// up): a port from `bind(0)` is released at once and can become the source
/// port of any outgoing connection (Envoy's, sluice's) before the server it
/// was meant for binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Each process starts at its own place in 20000..32000, so test
    // binaries run one after another do not retry each other's ports.
    let _ = NEXT.compare_exchange(0, 20_000 + std::process::id() % 6_000 * 2, Relaxed, Relaxed);
    loop {
        let p = NEXT.fetch_add(1, Relaxed);
        let port = u16::try_from(20_000 + (p - 20_000) % 12_000).expect("port");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn spawn(port: u16, dir: &Path, cluster: bool, env: &[(&str, &str)]) -> Child {
    spawn_with(dir, cluster, &["--port", &port.to_string()], env)
}

fn spawn_with(dir: &Path, cluster: bool, listen: &[&str], env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.envs(env.iter().copied())
        .args(listen)
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if cluster {
        cmd.args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--repl-diskless-sync-delay",
            "0",
        ]);
    }
    cmd.spawn().expect("redis-server (make test installs it)")
}

/// Sends one inline command and returns the raw reply.
pub fn command(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 65536];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_on(free_port(), false)
    }

    pub fn start_on(port: u16, cluster: bool) -> RedisServer {
        RedisServer::start_env(port, cluster, &[])
    }

    /// As [`RedisServer::start_on`], with environment variables set (a
    /// clock of its own through libfaketime).
    pub fn start_env(port: u16, cluster: bool, env: &[(&str, &str)]) -> RedisServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = spawn(port, dir.path(), cluster, env);
        let r = RedisServer {
            child: Some(child),
            port,
            dir,
            cluster,
        };
        assert!(
            eventually(Duration::from_secs(10), || command(port, "PING")
                .is_some_and(|p| p.starts_with("+PONG"))),
            "redis-server on {port} did not start"
        );
        r
    }

    /// A server that speaks only TLS (a certificate signed by a test CA,
    /// `ca.pem` in its directory) and knows the ACL user `app` with password
    /// `pw`.
    pub fn start_tls() -> RedisServer {
        RedisServer::start_tls_with(
            &[
                "--user", "app", "on", ">pw", "~*", "&*", "+@all", "--user", "default", "off",
            ],
            &["--user", "app", "--pass", "pw"],
        )
    }

    /// A server that speaks only TLS (as [`RedisServer::start_tls`]), its
    /// users set by `acl` (`--requirepass ...`, `--user ...`) and pinged with
    /// `auth` (redis-cli's `--user`/`--pass`).
    pub fn start_tls_with(acl: &[&str], auth: &[&str]) -> RedisServer {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        // A CA and a server certificate it signs (SAN 127.0.0.1), so a
        // client can verify the server against `ca.pem`.
        super::certificates(dir.path());
        std::fs::copy(dir.path().join("server.pem"), dir.path().join("cert.pem")).expect("cert");
        std::fs::copy(dir.path().join("server.key"), dir.path().join("key.pem")).expect("key");
        let p = port.to_string();
        let child = spawn_with(
            dir.path(),
            false,
            &[
                "--port",
                "0",
                "--tls-port",
                p.as_str(),
                "--tls-cert-file",
                "cert.pem",
                "--tls-key-file",
                "key.pem",
                "--tls-ca-cert-file",
                "cert.pem",
                "--tls-auth-clients",
                "no",
            ]
            .into_iter()
            .chain(acl.iter().copied())
            .collect::<Vec<_>>(),
            &[],
        );
        let r = RedisServer {
            child: Some(child),
            port,
            dir,
            cluster: false,
        };
        let ping = || {
            Command::new("redis-cli")
                .args(["--tls", "--insecure", "-p", &p, "--no-auth-warning"])
                .args(auth)
                .arg("ping")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG"))
        };
        assert!(
            eventually(Duration::from_secs(10), ping),
            "TLS redis-server did not start"
        );
        r
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The server's directory (a TLS server keeps `cert.pem` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// The counter keys held here: every key but sluice's recovery probe.
    pub fn counter_keys(&self) -> Vec<String> {
        self.cli(&["--scan"])
            .lines()
            .filter(|k| !k.is_empty() && !k.ends_with("sluice:probe"))
            .map(str::to_owned)
            .collect()
    }

    /// Each counter key held here with its count, read by one redis-cli
    /// (a process per key took seconds on a loaded machine: longer than a
    /// fixed window's key outlives its window).
    pub fn counts(&self) -> Vec<(String, u64)> {
        use std::io::Write;
        let keys = self.counter_keys();
        let mut child = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("redis-cli");
        let mut stdin = child.stdin.take().expect("stdin");
        for k in &keys {
            writeln!(stdin, "GET \"{k}\"").expect("write");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("redis-cli");
        let text = String::from_utf8_lossy(&out.stdout);
        keys.into_iter()
            .zip(text.lines())
            .filter_map(|(k, v)| Some((k, v.trim().trim_matches('"').parse().ok()?)))
            .collect()
    }

    /// `command`'s line of `INFO commandstats`, as `(field, value)` pairs
    /// (none if it never ran).
    fn commandstats(&self, command: &str) -> Vec<(String, u64)> {
        let info = self.cli(&["info", "commandstats"]);
        let prefix = format!("cmdstat_{command}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|line| {
                line.split(',')
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_owned(), v.trim().parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Calls of one command from `INFO commandstats`.
    pub fn calls(&self, command: &str) -> u64 {
        field(&self.commandstats(command), "calls")
    }

    /// Calls of `command` that did not fail: a script sent by its digest to
    /// a Redis that has not loaded it yet fails (NOSCRIPT) and is sent
    /// again whole, one store call counted twice.
    pub fn calls_ok(&self, command: &str) -> u64 {
        let stats = self.commandstats(command);
        field(&stats, "calls").saturating_sub(field(&stats, "failed_calls"))
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (with an empty dataset).
    pub fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn(self.port, self.dir.path(), self.cluster, &[]));
        let port = self.port;
        assert!(eventually(Duration::from_secs(10), || command(
            port, "PING"
        )
        .is_some_and(|p| p.starts_with("+PONG"))));
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        assert!(send_signal(pid, sig), "kill -{sig} redis-server failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A stopped process must be continued to die cleanly.
            send_signal(c.id(), "CONT");
        }
        self.kill();
    }
}

/// `redis-cli -p PORT ARGS...`: its output.
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One field of a `commandstats` line, 0 when absent.
fn field(stats: &[(String, u64)], name: &str) -> u64 {
    stats
        .iter()
        .find_map(|(k, v)| (k == name).then_some(*v))
        .unwrap_or(0)
}
