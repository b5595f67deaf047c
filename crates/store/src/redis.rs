//! Counters in Redis (one node through a bb8 pool of multiplexed connections)
//! or Redis Cluster (the redis crate's async cluster client).
//!
//! Increments run as a Lua script: `INCRBY` and an expiry for every key,
//! atomically, so a key can never be left without its expiry and the count
//! after the increment decides (no check-then-increment race). On one node the
//! increments of concurrent requests share script calls ([`batch`](super::batch));
//! in a cluster a request sends one script per slot, the slots in parallel.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo, Script};

mod clock;
mod count;
mod keys;
mod master;
mod reset;
mod target;

pub use keys::{KeyFormat, render_key, usage_key};
use target::seeds;
pub use target::{RedisTarget, mask};

use tokio::sync::{Notify, Semaphore};

use super::batch::Batcher;
use super::calls::Calls;
use super::demand::{self, DemandUpdate, MemberDemand};
use super::io_thread::IoThread;
pub use super::pool::RedisTls;
use super::pool::{self, Manager, Pooled, classify};
pub use super::script::EXPIRY_SLACK_SECONDS;
use super::script::{SCRIPT, decode};
pub use super::sentinel::Sentinel;
use super::{Hearing, Increment, StoreError};
use crate::limiter::Tally;

/// Settings of the Redis store.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: RedisTarget,
    pub pool_size: u32,
    /// A Cluster's script calls in flight at once.
    pub cluster_max_in_flight: usize,
    pub prefix: String,
    pub key_format: KeyFormat,
    /// Longest wait for a connection when (re)connecting.
    pub connect_timeout: Duration,
    /// Certificates for `rediss://` (private CA, mutual TLS).
    pub tls: Option<RedisTls>,
    /// Run the connections and the batcher on a thread of their own
    /// ([`io_thread`](super::io_thread)); off, they share the workers.
    pub io_thread: bool,
    /// How often a live Sentinel connection asks the sentinels whether its
    /// node is still the master (`--redis-sentinel-recheck`); a failover
    /// they announce, or an error of the connection, asks at once.
    pub sentinel_recheck: Duration,
}

enum Live {
    /// The batcher for increments, and the pool it draws from for the rest.
    Single(Batcher, Pooled<Manager>),
    Cluster(ClusterConnection),
}

/// The Redis store. Connections are made by [`RedisStore::connect`] and
/// replaced whole when the store recovers from an outage, so no request ever
/// uses a connection that died with the old server.
pub struct RedisStore {
    config: RedisConfig,
    /// Where single-node connections and the batcher run, when apart.
    io: Option<IoThread>,
    /// Shared with the task that follows a Sentinel's master
    /// ([`master`]), which empties it when the sentinels name another.
    live: Arc<ArcSwapOption<Live>>,
    /// Poked when a call to the single node fails: the Sentinel's master is
    /// asked again at once, not at the next period.
    failed: Arc<Notify>,
    script: Arc<Script>,
    demand_script: Script,
    /// A Cluster's calls sent and answered (a single node's batcher keeps
    /// its own), so a wait that ran out tells a silent node from a slow one.
    cluster_calls: Arc<Calls>,
    /// Bounds a Cluster's calls in flight: a call outlives a request that
    /// gave up on it, so without this a flood's calls pile up unbounded.
    cluster_permits: Arc<Semaphore>,
}

fn unavailable(e: impl fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisStore({})", self.config.target)
    }
}

impl RedisStore {
    /// How late the thread that reads Redis's replies runs: calls are
    /// marked answered on the I/O thread (on the workers without it), the
    /// batcher's and a Cluster's alike, and a reply waits in the socket for
    /// as long as that thread runs late.
    fn reader_late(&self, workers_late: Duration) -> Duration {
        self.io.as_ref().map_or(workers_late, IoThread::late_now)
    }

    /// A store that is not connected yet; nothing touches the network here.
    pub fn new(config: RedisConfig) -> Result<RedisStore, StoreError> {
        // Validate the URLs now so a typo fails at startup, not at first use.
        for url in seeds(&config.target) {
            url.as_str().into_connection_info().map_err(|e| {
                StoreError::Unavailable(format!("invalid Redis address {}: {e}", mask(&url)))
            })?;
        }
        let io = if config.io_thread {
            Some(IoThread::start()?)
        } else {
            None
        };
        Ok(RedisStore {
            io,
            live: Arc::new(ArcSwapOption::empty()),
            failed: Arc::new(Notify::new()),
            script: Arc::new(Script::new(SCRIPT)),
            demand_script: Script::new(demand::SCRIPT),
            cluster_calls: Arc::new(Calls::new()),
            cluster_permits: Arc::new(Semaphore::new(config.cluster_max_in_flight.max(1))),
            config,
        })
    }

    pub fn backend(&self) -> &'static str {
        match self.config.target {
            RedisTarget::Single(_) => "redis",
            RedisTarget::Cluster(_) => "redis-cluster",
            RedisTarget::Sentinel(_) => "redis-sentinel",
        }
    }

    pub fn target(&self) -> &RedisTarget {
        &self.config.target
    }

    /// Opens fresh connections, proves them with the increment script on a
    /// probe key and swaps them in. A PING is not enough: a Redis that answers
    /// PING but refuses scripts (no EVALSHA permission, out of memory, a
    /// proxy answering garbage) would be taken back only to fail every
    /// request. Returns how long the script call took, so the caller can tell
    /// a Redis that answers from one that answers in time.
    pub async fn connect(&self) -> Result<Duration, StoreError> {
        let mut master = None;
        let (live, rtt) = match &self.config.target {
            RedisTarget::Single(url) => self.connect_single(url).await?,
            RedisTarget::Sentinel(sentinel) => {
                // Asked on every (re)connect: after a failover this is the
                // new master, proven by the probe before any request uses it.
                let url = sentinel
                    .master_url(self.config.connect_timeout, self.config.tls.as_ref())
                    .await?;
                let connected = self.connect_single(&url).await?;
                master = Some((url, sentinel.clone()));
                connected
            }
            RedisTarget::Cluster(_) => {
                self.on_io(open_cluster(self.config.clone(), self.script.clone()))
                    .await?
            }
        };
        let live = Arc::new(live);
        tokio::spawn(clock::keep_following(Arc::downgrade(&live)));
        if let Some((url, sentinel)) = master {
            tokio::spawn(master::keep_asking(
                Arc::downgrade(&self.live),
                Arc::downgrade(&live),
                (url, sentinel),
                self.config.clone(),
                self.failed.clone(),
            ));
        }
        self.live.store(Some(live));
        Ok(rtt)
    }

    /// A pool of multiplexed connections to one node, proven by the probe;
    /// opened on the I/O thread when there is one, so the connections'
    /// tasks and the batcher run there.
    async fn connect_single(&self, url: &str) -> Result<(Live, Duration), StoreError> {
        self.on_io(open_single(
            url.to_owned(),
            self.config.clone(),
            self.script.clone(),
        ))
        .await
    }

    /// Runs `open` on the I/O thread when there is one, so the tasks it
    /// spawns (a connection's, the batcher, a Cluster's router) live there.
    async fn on_io(
        &self,
        open: impl Future<Output = Result<(Live, Duration), StoreError>> + Send + 'static,
    ) -> Result<(Live, Duration), StoreError> {
        match &self.io {
            Some(io) => io.run(open).await,
            None => open.await,
        }
    }

    /// Writes a member's demand to its bucket's hash and reads the fleet's.
    pub async fn demand(&self, u: &DemandUpdate) -> Result<Vec<MemberDemand>, StoreError> {
        let live = self
            .live
            .load_full()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
        let mut inv = self
            .demand_script
            .key(format!("{}sluice:quota:{}", self.config.prefix, u.table));
        inv.arg(u.member)
            // Three decimals: demand::STORED_WITHIN.
            .arg(u.demand.map(|d| format!("{d:.3}")).unwrap_or_default())
            .arg(u64::try_from(u.ttl.as_millis()).unwrap_or(u64::MAX).max(1));
        let raw: Vec<String> = match &*live {
            Live::Single(_, pool) => {
                let mut conn = pool.get().await?.clone();
                inv.invoke_async(&mut conn).await
            }
            Live::Cluster(conn) => inv.invoke_async(&mut conn.clone()).await,
        }
        .map_err(|e| classify(&e))?;
        demand::decode(&raw)
    }

    /// The Redis key of one counter in its current window.
    pub fn redis_key(&self, inc: &Increment) -> String {
        self.keys(inc).swap_remove(0)
    }
}

/// A pool of multiplexed connections to `url`, proven by the probe, and
/// the batcher that draws from it (spawned where this runs).
async fn open_single(
    url: String,
    config: RedisConfig,
    script: Arc<Script>,
) -> Result<(Live, Duration), StoreError> {
    let client = pool::client(&url, config.tls.as_ref())?;
    let pool = Pooled::open(Manager(client), config.pool_size, config.connect_timeout).await?;
    let mut conn = pool.get().await?.clone();
    let rtt = probe_script(&config.prefix, &script, &mut conn).await?;
    clock::read(&mut conn).await;
    let in_flight = usize::try_from(config.pool_size).unwrap_or(1);
    Ok((
        Live::Single(Batcher::start(pool.clone(), script, in_flight), pool),
        rtt,
    ))
}

/// A Cluster connection, proven by the probe and `CLUSTER INFO`; its
/// router and node connections are spawned where this runs.
async fn open_cluster(
    config: RedisConfig,
    script: Arc<Script>,
) -> Result<(Live, Duration), StoreError> {
    let mut builder = redis::cluster::ClusterClient::builder(seeds(&config.target))
        .connection_timeout(config.connect_timeout);
    if let Some(tls) = &config.tls {
        builder = builder.certs(tls.certificates()?);
    }
    let client = builder.build().map_err(unavailable)?;
    let mut conn = client.get_async_connection().await.map_err(unavailable)?;
    let rtt = probe_script(&config.prefix, &script, &mut conn).await?;
    clock::read(&mut conn).await;
    // A PING reaches any node; a cluster short of a master (before its
    // replica takes over) still answers it, and would be declared back only
    // to fail again on that master's slots.
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    if !info.contains("cluster_state:ok") {
        return Err(StoreError::Unavailable(
            "cluster_state is not ok (a master is down and not yet replaced)".into(),
        ));
    }
    Ok((Live::Cluster(conn), rtt))
}

/// Adds nothing to a probe key through the increment script, as a request
/// would, and checks the answer.
async fn probe_script(
    prefix: &str,
    script: &Script,
    conn: &mut impl redis::aio::ConnectionLike,
) -> Result<Duration, StoreError> {
    let started = std::time::Instant::now();
    let key = format!("{prefix}sluice:probe");
    let raw: Vec<i64> = script
        .key(key)
        .arg(0)
        .arg(0)
        .arg(EXPIRY_SLACK_SECONDS)
        .arg(0)
        .arg(0)
        .arg("")
        .arg(EXPIRY_SLACK_SECONDS)
        .arg(0)
        .invoke_async(conn)
        .await
        .map_err(|e| classify(&e))?;
    // Only ever incremented by 0, the probe key holds 0: a proxy or fake
    // that answers a fixed count is caught here.
    match raw.as_slice() {
        [0, 0, 0] => Ok(started.elapsed()),
        other => Err(StoreError::BadReply(format!(
            "probe script answered {other:?}"
        ))),
    }
}

impl super::Primary for RedisStore {
    fn increment<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> super::BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        Box::pin(RedisStore::increment(self, batch))
    }

    fn probe(&self) -> super::BoxFuture<'_, Result<Duration, StoreError>> {
        Box::pin(self.connect())
    }

    fn reset<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> super::BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(RedisStore::reset(self, batch))
    }

    fn stalled(&self, at_least: Duration, workers_late: Duration) -> Option<bool> {
        let late = self.reader_late(workers_late);
        match self.live.load().as_deref() {
            Some(Live::Single(batcher, _)) => Some(batcher.stalled(at_least + late)),
            Some(Live::Cluster(_)) => self.cluster_calls.heard(at_least, late),
            None => None,
        }
    }

    fn hearing(&self, workers_late: Duration) -> Option<Hearing> {
        let reader_late = self.reader_late(workers_late);
        let silent = match self.live.load().as_deref()? {
            Live::Single(batcher, _) => batcher.silence(),
            Live::Cluster(_) => self.cluster_calls.silence(),
        };
        Some(Hearing {
            silent,
            reader_late,
        })
    }

    fn answered_within(&self, within: Duration) -> bool {
        match self.live.load().as_deref() {
            Some(Live::Single(batcher, _)) => batcher.answered_within(within),
            Some(Live::Cluster(_)) => self.cluster_calls.answered_within(within),
            None => false,
        }
    }

    fn backend(&self) -> &'static str {
        RedisStore::backend(self)
    }

    fn describe(&self) -> String {
        self.config.target.to_string()
    }

    fn demand<'a>(
        &'a self,
        update: &'a DemandUpdate,
    ) -> super::BoxFuture<'a, Result<Vec<MemberDemand>, StoreError>> {
        Box::pin(RedisStore::demand(self, update))
    }
}

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
