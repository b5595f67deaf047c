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
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::future::try_join_all;
use sha2::{Digest, Sha256};

mod conn;

use conn::{Conn, Manager};

use super::calls::Calls;
use super::pool::Pooled;
use super::script::EXPIRY_SLACK_SECONDS;
use super::{BoxFuture, Hearing, Increment, StoreError};
use crate::limiter::{Algorithm, Refill, Tally};

/// Where memcached is.
#[derive(Debug, Clone)]
pub struct MemcacheConfig {
    /// `host:port` of each server; keys are spread over them.
    pub servers: Vec<String>,
    pub prefix: String,
    pub pool_size: u32,
    pub connect_timeout: Duration,
}

/// Writes of one token bucket retried when other instances keep winning.
const CAS_TRIES: usize = 8;

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn pool_of(pools: &[Pooled<Manager>], server: usize) -> Result<&Pooled<Manager>, StoreError> {
    pools
        .get(server)
        .ok_or_else(|| unavailable("no such server"))
}

/// A token bucket's take (or refund): `gets` the theoretical arrival time,
/// decide, `cas` it back (or `add` it), again while other instances win.
async fn bucket(
    conn: &mut Conn,
    key: &str,
    inc: &Increment,
    refill: Refill,
) -> Result<Tally, StoreError> {
    for _ in 0..CAS_TRIES {
        let now_us = inc.at_us;
        let found = conn.gets(key).await?;
        let tat = found.as_ref().map_or(0, |f| f.value);
        let (new_tat, tally) = if inc.refund {
            refill.give_back(tat, now_us, inc.hits)
        } else {
            refill.take(tat, now_us, inc.hits)
        };
        // Nothing to write: refused (and not taken into an overdraft), a
        // check, or a refund of a bucket that is full or not there.
        let unchanged = new_tat == tat
            || inc.hits == 0
            || (inc.refund && found.as_ref().is_none_or(|f| f.value <= now_us));
        if unchanged {
            return Ok(tally);
        }
        let keep = (new_tat.saturating_sub(now_us) / 1_000_000) + 60;
        if conn.store(key, new_tat, keep, found.map(|f| f.cas)).await? {
            return Ok(tally);
        }
    }
    Err(StoreError::Unavailable(format!(
        "{key}: too many concurrent writers"
    )))
}

/// The memcached store.
pub struct MemcacheStore {
    config: MemcacheConfig,
    pools: ArcSwapOption<Vec<Pooled<Manager>>>,
    /// Calls sent and answered on every connection, so a wait that ran out
    /// tells a silent memcached from a slow one.
    calls: Arc<Calls>,
}

impl MemcacheStore {
    pub fn new(config: MemcacheConfig) -> Result<MemcacheStore, StoreError> {
        if config.servers.is_empty() {
            return Err(unavailable("no memcached server given"));
        }
        // As many answers listened for as connections can be open.
        let connections = usize::try_from(config.pool_size).unwrap_or(1) * config.servers.len();
        Ok(MemcacheStore {
            config,
            pools: ArcSwapOption::empty(),
            calls: Arc::new(Calls::listening_for(connections)),
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
                calls: self.calls.clone(),
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
        if inc.algorithm == Algorithm::Concurrency {
            // Slots need a set per counter, expiring member by member;
            // memcached has no such thing.
            return Err(StoreError::Rejected(
                "memcached holds no leases: algorithm: concurrency needs Redis or memory".into(),
            ));
        }
        let window = inc.window;
        let ttl = window.period.seconds().max(1) * 2 + 60;
        let start = match inc.algorithm {
            Algorithm::TokenBucket { .. } => 0,
            _ => window.start.0,
        };
        let (key, server) = self.key(inc, start);
        let mut conn = pool_of(pools, server)?.get().await?;
        match inc.algorithm {
            Algorithm::FixedWindow | Algorithm::Concurrency => {
                Ok(Tally::Count(conn.window_count(&key, inc, ttl).await?))
            }
            Algorithm::SlidingWindow => {
                let current = conn.window_count(&key, inc, ttl).await?;
                let previous = self.previous(pools, &mut conn, server, inc).await?;
                Ok(Tally::Sliding { current, previous })
            }
            Algorithm::TokenBucket { refill, .. } => {
                let tally = bucket(&mut conn, &key, inc, refill).await?;
                drop(conn);
                Ok(tally.with_asked(self.taken(pools, inc, &tally).await))
            }
        }
    }

    /// A bucket's tokens taken in the window (asked, where the usage is the
    /// whole demand), a count of its own kept to the window's end: the
    /// advisor's usage. `None` when it was not counted or could not be: a
    /// refused request costs no round trip more, and a failure here never
    /// fails the decision.
    async fn taken(
        &self,
        pools: &[Pooled<Manager>],
        inc: &Increment,
        tally: &Tally,
    ) -> Option<u64> {
        if !inc.counts_usage(tally) {
            return None;
        }
        let (key, server) = self.key(inc, inc.window.start.0);
        let now = crate::limiter::Now(inc.at_us / 1_000_000);
        let keep = inc.window.seconds_until_reset(now) + EXPIRY_SLACK_SECONDS;
        let mut conn = pool_of(pools, server).ok()?.get().await.ok()?;
        conn.window_count(&key, inc, keep).await.ok()
    }

    /// The previous window's count of a sliding window; its key may live on
    /// another server than the current one (`conn`'s).
    async fn previous(
        &self,
        pools: &[Pooled<Manager>],
        conn: &mut Conn,
        server: usize,
        inc: &Increment,
    ) -> Result<u64, StoreError> {
        let (prev, prev_server) = self.key(inc, inc.window.previous().start.0);
        let found = if prev_server == server {
            conn.gets(&prev).await?
        } else {
            pool_of(pools, prev_server)?
                .get()
                .await?
                .gets(&prev)
                .await?
        };
        Ok(found.map_or(0, |f| f.value))
    }

    /// Deletes every key of `batch`'s counters (an operator's reset).
    pub async fn reset(&self, batch: &[&Increment]) -> Result<(), StoreError> {
        let pools = self
            .pools
            .load_full()
            .ok_or_else(|| unavailable("not connected"))?;
        for inc in batch {
            let starts = match inc.algorithm {
                // memcached holds no leases, so there is nothing to release.
                Algorithm::Concurrency => vec![],
                Algorithm::TokenBucket { .. } => vec![0],
                Algorithm::FixedWindow => vec![inc.window.start.0],
                Algorithm::SlidingWindow => {
                    vec![inc.window.start.0, inc.window.previous().start.0]
                }
            };
            for start in starts {
                let (key, server) = self.key(inc, start);
                pool_of(&pools, server)?.get().await?.delete(&key).await?;
            }
        }
        Ok(())
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

    fn reset<'a>(&'a self, batch: &'a [&'a Increment]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(MemcacheStore::reset(self, batch))
    }

    fn probe(&self) -> BoxFuture<'_, Result<Duration, StoreError>> {
        Box::pin(self.connect())
    }

    fn stalled(&self, at_least: Duration, workers_late: Duration) -> Option<bool> {
        self.calls.heard(at_least, workers_late)
    }

    fn hearing(&self, workers_late: Duration) -> Option<Hearing> {
        Some(Hearing {
            silent: self.calls.silence(),
            reader_late: workers_late,
        })
    }

    fn answered_within(&self, within: Duration) -> bool {
        self.calls.answered_within(within)
    }

    fn backend(&self) -> &'static str {
        "memcache"
    }

    fn describe(&self) -> String {
        self.config.servers.join(",")
    }
}

#[cfg(test)]
#[path = "memcache_tests.rs"]
mod tests;
