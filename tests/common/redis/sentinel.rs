//! A real Sentinel watching a master.

use super::*;

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
