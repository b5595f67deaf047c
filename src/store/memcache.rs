//! memcached as the shared store (the reference's `BACKEND_TYPE=memcache`),
//! counting exactly where the reference does not: it increments after
//! answering, so concurrent requests can all pass a limit. Here every count
//! is the answer of the increment itself:
//!
//! - fixed window: `incr`; a missing key is created by `add` with the hits
//!   (and if another instance added it first, `incr` again), so no hit is
//!   lost and no two requests see the same count;
//! - sliding window: the same on this window's key, and `get` of the
//!   previous one;
//! - token bucket: `gets` the theoretical arrival time, decide, `cas` it back
//!   (or `add` it), retrying when another instance wrote in between. The time
//!   is this instance's clock (memcached has none to offer): keep the
//!   instances' clocks in step (NTP), as the bucket's tolerance is their skew.
//!
//! Keys are a digest of the counter key (no value in clear, within
//! memcached's 250 bytes), spread over the servers by that digest. Every call
//! runs under the same safety net as Redis (timeout, breaker, failure policy).

use std::fmt::Write as _;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::future::try_join_all;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use super::pool::Pooled;
use super::{BoxFuture, Increment, StoreError};
use crate::limiter::{Algorithm, Tally};

/// Where memcached is.
#[derive(Debug, Clone)]
pub struct MemcacheConfig {
    /// `host:port` of each server; keys are spread over them.
    pub servers: Vec<String>,
    pub prefix: String,
    pub pool_size: u32,
    pub connect_timeout: Duration,
}

/// Bytes of a reply line we read at most; memcached's are far shorter.
const MAX_LINE: u64 = 512;
/// Writes of one token bucket retried when other instances keep winning.
const CAS_TRIES: usize = 8;

/// One connection. `pending` is set from a command's first byte until its
/// whole reply is read: a call cut short (the store timeout drops it, a
/// reply that does not parse) leaves bytes in flight, and such a connection
/// must never serve another request, which would read the old reply as its
/// own count.
struct Conn {
    io: BufStream<TcpStream>,
    pending: bool,
}

/// What `gets` found.
struct Found {
    value: u64,
    cas: u64,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl Conn {
    /// Writes a command and reads the first line of its reply; the caller
    /// clears `pending` once it has read the rest.
    async fn send(&mut self, cmd: &str) -> Result<String, StoreError> {
        self.pending = true;
        self.io
            .write_all(cmd.as_bytes())
            .await
            .map_err(unavailable)?;
        self.io.flush().await.map_err(unavailable)?;
        self.line().await
    }

    async fn line(&mut self) -> Result<String, StoreError> {
        let mut line = String::new();
        let n = (&mut self.io)
            .take(MAX_LINE)
            .read_line(&mut line)
            .await
            .map_err(unavailable)?;
        if n == 0 {
            return Err(unavailable("memcached closed the connection"));
        }
        if !line.ends_with("\r\n") {
            return Err(StoreError::BadReply(format!("reply line {line:.40}")));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    /// The count after `incr`, or `None` when the key is missing.
    async fn incr(&mut self, key: &str, by: u64) -> Result<Option<u64>, StoreError> {
        self.arithmetic("incr", key, by).await
    }

    /// The count after `decr` (memcached floors it at 0), or `None` when the
    /// key is missing: a refund never makes a counter.
    async fn decr(&mut self, key: &str, by: u64) -> Result<Option<u64>, StoreError> {
        self.arithmetic("decr", key, by).await
    }

    /// `incr` or `decr` (`verb`): the count after, or `None` when missing.
    async fn arithmetic(
        &mut self,
        verb: &str,
        key: &str,
        by: u64,
    ) -> Result<Option<u64>, StoreError> {
        let reply = self.send(&format!("{verb} {key} {by}\r\n")).await?;
        self.pending = false;
        match reply.as_str() {
            "NOT_FOUND" => Ok(None),
            r if r.starts_with("CLIENT_ERROR") => Err(StoreError::Rejected(r.to_owned())),
            r => r
                .parse()
                .map(Some)
                .map_err(|_| StoreError::BadReply(format!("{verb} answered {r:.40}"))),
        }
    }

    /// This window's counter after adding `hits`, or after giving them back.
    async fn window_count(
        &mut self,
        key: &str,
        inc: &Increment,
        ttl: u64,
    ) -> Result<u64, StoreError> {
        if inc.refund {
            Ok(self.decr(key, inc.hits).await?.unwrap_or(0))
        } else {
            self.add_hits(key, inc.hits, ttl).await
        }
    }

    /// `add` (`cas` = None) or `cas`: whether it was stored.
    async fn store(
        &mut self,
        key: &str,
        value: u64,
        ttl: u64,
        cas: Option<u64>,
    ) -> Result<bool, StoreError> {
        let data = value.to_string();
        let cmd = match cas {
            None => format!("add {key} 0 {ttl} {}\r\n{data}\r\n", data.len()),
            Some(c) => format!("cas {key} 0 {ttl} {} {c}\r\n{data}\r\n", data.len()),
        };
        let reply = self.send(&cmd).await?;
        self.pending = false;
        match reply.as_str() {
            "STORED" => Ok(true),
            "NOT_STORED" | "EXISTS" | "NOT_FOUND" => Ok(false),
            r => Err(StoreError::BadReply(format!("store answered {r:.40}"))),
        }
    }

    async fn gets(&mut self, key: &str) -> Result<Option<Found>, StoreError> {
        let head = self.send(&format!("gets {key}\r\n")).await?;
        if head == "END" {
            self.pending = false;
            return Ok(None);
        }
        let bad = || StoreError::BadReply(format!("gets answered {head:.60}"));
        let parts: Vec<&str> = head.split(' ').collect();
        let (len, cas) = match parts.as_slice() {
            ["VALUE", _, _, len, cas] => (
                len.parse::<u64>().map_err(|_| bad())?,
                cas.parse::<u64>().map_err(|_| bad())?,
            ),
            _ => return Err(bad()),
        };
        if len > 32 {
            return Err(StoreError::Rejected(format!("{key} holds {len} bytes")));
        }
        let data = self.line().await?;
        if self.line().await? != "END" {
            return Err(bad());
        }
        self.pending = false;
        let value = data
            .parse()
            .map_err(|_| StoreError::Rejected(format!("{key} holds no number")))?;
        Ok(Some(Found { value, cas }))
    }

    /// Adds `hits` to a window counter, creating it if needed: the count after.
    async fn add_hits(&mut self, key: &str, hits: u64, ttl: u64) -> Result<u64, StoreError> {
        for _ in 0..3 {
            if let Some(n) = self.incr(key, hits).await? {
                return Ok(n);
            }
            if self.store(key, hits, ttl, None).await? {
                return Ok(hits);
            }
            // Another instance created it in between: count on top of it.
        }
        Err(StoreError::Unavailable(format!("{key} keeps vanishing")))
    }
}

/// Opens connections to one server.
struct Manager {
    addr: String,
    timeout: Duration,
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = io::Error;

    async fn connect(&self) -> Result<Conn, io::Error> {
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            io: BufStream::new(stream),
            pending: false,
        })
    }

    async fn is_valid(&self, _: &mut Conn) -> Result<(), io::Error> {
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.pending
    }
}

/// The memcached store.
pub struct MemcacheStore {
    config: MemcacheConfig,
    pools: ArcSwapOption<Vec<Pooled<Manager>>>,
}

impl MemcacheStore {
    pub fn new(config: MemcacheConfig) -> Result<MemcacheStore, StoreError> {
        if config.servers.is_empty() {
            return Err(unavailable("no memcached server given"));
        }
        Ok(MemcacheStore {
            config,
            pools: ArcSwapOption::empty(),
        })
    }

    /// Fresh pools, proven by an `incr` of 0 on a probe key on every server.
    async fn connect(&self) -> Result<Duration, StoreError> {
        let started = std::time::Instant::now();
        let mut pools = Vec::new();
        for addr in &self.config.servers {
            let manager = Manager {
                addr: addr.clone(),
                timeout: self.config.connect_timeout,
            };
            let pool =
                Pooled::open(manager, self.config.pool_size, self.config.connect_timeout).await?;
            let mut conn = pool.get().await?;
            let probe = format!("{}sluice:probe", self.config.prefix);
            match conn.incr(&probe, 0).await? {
                None | Some(0) => {}
                Some(n) => return Err(StoreError::BadReply(format!("probe counted {n}"))),
            }
            drop(conn);
            pools.push(pool);
        }
        self.pools.store(Some(Arc::new(pools)));
        Ok(started.elapsed())
    }

    /// The key of `inc` in window `start`, and the server that holds it.
    fn key(&self, inc: &Increment, start: u64) -> (String, usize) {
        let digest = Sha256::digest(inc.key.as_bytes());
        let mut key = format!("{}sluice:", self.config.prefix);
        crate::hex::push_hex(&mut key, digest.get(..16).unwrap_or_default());
        let _ = write!(key, ":{start}");
        let mut first = [0u8; 8];
        first.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
        let server = (u64::from_be_bytes(first) % self.config.servers.len().max(1) as u64) as usize;
        (key, server)
    }

    async fn count(&self, pools: &[Pooled<Manager>], inc: &Increment) -> Result<Tally, StoreError> {
        let window = inc.window;
        let ttl = window.period.seconds().max(1) * 2 + 60;
        let start = match inc.algorithm {
            Algorithm::TokenBucket { .. } => 0,
            _ => window.start.0,
        };
        let (key, server) = self.key(inc, start);
        let pool = pools
            .get(server)
            .ok_or_else(|| unavailable("no such server"))?;
        if inc.algorithm == Algorithm::Concurrency {
            // Leases need a set per counter, expiring member by member;
            // memcached has no such thing.
            return Err(StoreError::Rejected(
                "memcached holds no leases: algorithm: concurrency needs Redis or memory".into(),
            ));
        }
        let mut conn = pool.get().await?;
        match inc.algorithm {
            Algorithm::FixedWindow | Algorithm::Concurrency => {
                Ok(Tally::Count(conn.window_count(&key, inc, ttl).await?))
            }
            Algorithm::SlidingWindow => {
                let current = conn.window_count(&key, inc, ttl).await?;
                // The previous window's key may live on another server.
                let (prev, prev_server) = self.key(inc, window.previous().start.0);
                let previous = if prev_server == server {
                    conn.gets(&prev).await?
                } else {
                    let p = pools
                        .get(prev_server)
                        .ok_or_else(|| unavailable("no such server"))?;
                    p.get().await?.gets(&prev).await?
                };
                Ok(Tally::Sliding {
                    current,
                    previous: previous.map_or(0, |f| f.value),
                })
            }
            Algorithm::TokenBucket { refill, .. } => {
                for _ in 0..CAS_TRIES {
                    let now_us = inc.at_us;
                    let found = conn.gets(&key).await?;
                    let tat = found.as_ref().map_or(0, |f| f.value);
                    let (tat, tally) = if inc.refund {
                        refill.give_back(tat, now_us, inc.hits)
                    } else {
                        refill.take(tat, now_us, inc.hits)
                    };
                    // Nothing to write: refused, a check, or a refund of a
                    // bucket that is full or not there.
                    let unchanged = !matches!(tally, Tally::Bucket { taken: true, .. })
                        || inc.hits == 0
                        || (inc.refund && found.as_ref().is_none_or(|f| f.value <= now_us));
                    if unchanged {
                        return Ok(tally);
                    }
                    let keep = (tat.saturating_sub(now_us) / 1_000_000) + 60;
                    if conn.store(&key, tat, keep, found.map(|f| f.cas)).await? {
                        return Ok(tally);
                    }
                }
                Err(StoreError::Unavailable(format!(
                    "{key}: too many concurrent writers"
                )))
            }
        }
    }

    pub async fn increment(&self, batch: &[&Increment]) -> Result<Vec<Tally>, StoreError> {
        let pools = self
            .pools
            .load_full()
            .ok_or_else(|| unavailable("not connected"))?;
        try_join_all(batch.iter().map(|inc| self.count(&pools, inc))).await
    }
}

impl super::Primary for MemcacheStore {
    fn increment<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        Box::pin(MemcacheStore::increment(self, batch))
    }

    fn probe(&self) -> BoxFuture<'_, Result<Duration, StoreError>> {
        Box::pin(self.connect())
    }

    fn backend(&self) -> &'static str {
        "memcache"
    }

    fn describe(&self) -> String {
        self.config.servers.join(",")
    }
}
