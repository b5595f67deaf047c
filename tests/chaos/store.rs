//! The store a fleet shares, one scenario each: a redis-server, or a
//! memcached. The nemesis stops, kills and restarts it the same way.

use super::common::memcache::Memcached;
use super::common::redis::RedisServer;
use super::common::send_signal;

/// Which store a run's fleet shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redis,
    Memcached,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Memcached => "memcached",
        }
    }

    /// `CHAOS_STORE` (`redis`, the default, or `memcached`).
    pub fn from_env() -> Backend {
        match std::env::var("CHAOS_STORE").as_deref() {
            Ok("memcached") => Backend::Memcached,
            _ => Backend::Redis,
        }
    }

    /// The serve flags that point an instance at `port` (its proxy).
    pub fn flags(self, port: u16) -> Vec<String> {
        match self {
            Backend::Redis => vec!["--redis-url".into(), format!("redis://127.0.0.1:{port}")],
            Backend::Memcached => vec!["--memcache-servers".into(), format!("127.0.0.1:{port}")],
        }
    }
}

pub enum Store {
    Redis(RedisServer),
    Memcached(Memcached),
}

impl Store {
    pub fn start(backend: Backend) -> Store {
        match backend {
            Backend::Redis => Store::Redis(RedisServer::start()),
            Backend::Memcached => Store::Memcached(Memcached::start()),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Store::Redis(r) => r.port,
            Store::Memcached(m) => m.port,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Store::Redis(r) => r.pid(),
            Store::Memcached(m) => m.pid(),
        }
    }

    pub fn signal(&self, sig: &str) {
        if self.pid() > 0 {
            send_signal(self.pid(), sig);
        }
    }

    pub fn kill(&mut self) {
        match self {
            Store::Redis(r) => r.kill(),
            Store::Memcached(m) => m.kill(),
        }
    }

    /// Starts it again on its port, empty.
    pub fn restart(&mut self) {
        match self {
            Store::Redis(r) => r.restart(),
            Store::Memcached(m) => m.restart(),
        }
    }
}
