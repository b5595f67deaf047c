//! A real memcached on a free loopback port, killed when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::eventually;
use super::redis::free_port;

pub struct Memcached {
    child: Option<Child>,
    pub port: u16,
}

impl Memcached {
    pub fn start() -> Memcached {
        Memcached::start_on(free_port())
    }

    pub fn start_on(port: u16) -> Memcached {
        let child = Command::new("memcached")
            .args(["-l", "127.0.0.1", "-U", "0", "-u", "root", "-m", "32"])
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached (make deps installs it)");
        let up = eventually(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "memcached did not start");
        Memcached {
            child: Some(child),
            port,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends one text-protocol command and returns the first reply line.
    pub fn command(&self, cmd: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect memcached");
        s.write_all(cmd.as_bytes()).expect("write");
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).expect("read");
        line.trim_end().to_owned()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        *self = Memcached::start_on(self.port);
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}
