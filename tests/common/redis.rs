//! Real redis-server processes on free loopback ports, for the Redis tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, send_signal};

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

/// A Redis Cluster of three masters, created with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three masters, no replicas.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(0)
    }

    /// Three masters with `replicas` replicas each; a replica takes over
    /// about two seconds after its master dies.
    pub fn start_with(replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::start_on(free_cluster_port(), true))
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".to_owned(),
            replicas.to_string(),
            "--cluster-yes".to_owned(),
        ]);
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for n in &nodes {
            assert!(
                eventually(Duration::from_secs(20), || n
                    .cli(&["cluster", "info"])
                    .contains("cluster_state:ok")),
                "cluster not ok on {}",
                n.port
            );
        }
        // A replica can take over only once it has synced with its master.
        for n in &nodes {
            assert!(
                eventually(Duration::from_secs(30), || {
                    let r = n.cli(&["info", "replication"]);
                    r.contains("role:master") || r.contains("master_link_status:up")
                }),
                "replica on {} never synced",
                n.port
            );
        }
        RedisCluster { nodes }
    }

    /// The nodes that answer `ROLE` with `master`.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].cli(&["role"]).starts_with("master"))
            .collect()
    }

    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A TCP proxy in front of a Redis that delays every chunk the client sends
/// by an adjustable number of milliseconds: a slow network or a slow server.
pub struct DelayProxy {
    pub port: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Chunks read from clients so far (before their delay).
    chunks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DelayProxy {
    pub fn start(target: u16) -> DelayProxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let delay = delay_ms.clone();
        let chunks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = chunks.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut c_read, mut s_write) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let (mut s_read, mut c_write) = (server, client);
                let (delay, seen) = (delay.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        seen.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(delay.load(Ordering::Relaxed)));
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_write.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        DelayProxy {
            port,
            delay_ms,
            chunks,
        }
    }

    /// Chunks the proxy has read from sluice so far: a call sent.
    pub fn chunks(&self) -> u64 {
        self.chunks.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_delay(&self, ms: u64) {
        self.delay_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
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

/// One `redis-server --sentinel` watching `master` on `master_port`, with a
/// quick failover (1 s down, quorum 1); killed when dropped.
pub struct RedisSentinel {
    child: Option<Child>,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    pub fn start(master: &str, master_port: u16) -> RedisSentinel {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {master} 127.0.0.1 {master_port} 1\nsentinel down-after-milliseconds {master} 1000\nsentinel failover-timeout {master} 5000\nsentinel parallel-syncs {master} 1\n",
                dir.path().display()
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let s = RedisSentinel {
            child: Some(child),
            port,
            _dir: dir,
        };
        assert!(
            eventually(Duration::from_secs(10), || s.master_port(master).is_some()),
            "sentinel on {port} did not start"
        );
        s
    }

    /// A `redis-cli` command against this sentinel; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// The master's port as this sentinel knows it.
    pub fn master_port(&self, master: &str) -> Option<u16> {
        let out = Command::new("redis-cli")
            .args([
                "-p",
                &self.port.to_string(),
                "sentinel",
                "get-master-addr-by-name",
                master,
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One field of a `commandstats` line, 0 when absent.
fn field(stats: &[(String, u64)], name: &str) -> u64 {
    stats
        .iter()
        .find_map(|(k, v)| (k == name).then_some(*v))
        .unwrap_or(0)
}
