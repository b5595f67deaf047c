//! Counters in Redis (one node through a bb8 pool of multiplexed connections)
//! or Redis Cluster (the redis crate's async cluster client).
//!
//! Increments run as a Lua script: `INCRBY` and an expiry for every key,
//! atomically, so a key can never be left without its expiry and the count
//! after the increment decides (no check-then-increment race). On one node the
//! increments of concurrent requests share script calls ([`batch`](super::batch));
//! in a cluster a request sends one script per slot, the slots in parallel.

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bb8_redis::RedisConnectionManager;
use futures_util::future::try_join_all;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{IntoConnectionInfo, Script};
use sha2::{Digest, Sha256};

use super::batch::Batcher;
use super::{CounterKey, Increment, StoreError};
use crate::hex::push_hex;
use crate::limiter::Now;

/// Seconds a key may outlive its window. Expiries are relative to sluice's own
/// clock, so a skew between sluice and Redis cannot end a window early.
pub const EXPIRY_SLACK_SECONDS: u64 = 5;

/// Each key is incremented under `pcall`, so one key's error is that key's
/// answer and not the whole call's: a counter that would overflow answers
/// `OVERFLOW`, a key that holds something else answers `NOT_A_COUNTER`. Any
/// other error (out of memory, a read-only replica, no permission) is the
/// store's and fails the call.
const INCREMENT: &str = r"
local out = {}
for i = 1, #KEYS do
  local n = redis.pcall('INCRBY', KEYS[i], ARGV[2 * i - 1])
  if type(n) == 'table' then
    local e = n.err or ''
    if string.find(e, 'overflow', 1, true) then
      out[i] = -1
    elseif string.find(e, 'WRONGTYPE', 1, true) or string.find(e, 'not an integer', 1, true) then
      out[i] = -2
    else
      return n
    end
  else
    out[i] = n
    redis.call('EXPIRE', KEYS[i], ARGV[2 * i])
  end
end
return out
";

/// The script's answer for a counter past `i64::MAX`: it is over any limit.
const OVERFLOW: i64 = -1;
/// The script's answer for a key that holds something other than a count.
const NOT_A_COUNTER: i64 = -2;

/// One request's counts from the script's raw answers.
pub(super) fn decode_counts(raw: &[i64]) -> Result<Vec<u64>, StoreError> {
    raw.iter()
        .map(|&n| match n {
            OVERFLOW => Ok(u64::MAX),
            NOT_A_COUNTER => Err(StoreError::Rejected(
                "a counter key holds a value that is not a count".into(),
            )),
            n => u64::try_from(n).map_err(|_| StoreError::BadReply(format!("negative count {n}"))),
        })
        .collect()
}

/// A Redis error as a store error: a reply that cannot be read is a bad
/// reply; everything else means the store cannot count right now.
pub(super) fn classify(e: &redis::RedisError) -> StoreError {
    match e.kind() {
        redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse => {
            StoreError::BadReply(e.to_string())
        }
        _ => StoreError::Unavailable(e.to_string()),
    }
}

/// How counter keys are written in Redis (`--key-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum KeyFormat {
    /// `<prefix><domain>:<UNIT>:<window start>:<sha256 of domain, unit and
    /// entries>`: collision-free, and no descriptor value appears in clear.
    #[default]
    Sluice,
    /// envoyproxy/ratelimit's `<prefix><domain>_<k1>_<v1>_..._<window start>`,
    /// to share counters with a fleet of the reference during a migration.
    Envoyproxy,
}

/// Where the counters live.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://[user:pass@]host:port[/db]` or `rediss://...` for TLS.
    Single(String),
    /// Seed nodes of a cluster, each a URL or `host:port`.
    Cluster(Vec<String>),
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Target {
    /// Never shows a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Single(url) => f.write_str(&mask(url)),
            Target::Cluster(seeds) => {
                let masked: Vec<String> = seeds.iter().map(|s| mask(s)).collect();
                write!(f, "cluster {}", masked.join(","))
            }
        }
    }
}

/// `redis://user:secret@host` becomes `redis://user:***@host`.
pub fn mask(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((creds, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = creds.split_once(':').map_or("", |(u, _)| u);
    format!("{scheme}://{user}:***@{host}")
}

/// Settings of the Redis store.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: Target,
    pub pool_size: u32,
    pub prefix: String,
    pub key_format: KeyFormat,
    /// Longest wait for a connection when (re)connecting.
    pub connect_timeout: Duration,
}

enum Live {
    Single(Batcher),
    Cluster(ClusterConnection),
}

/// The Redis store. Connections are made by [`RedisStore::connect`] and
/// replaced whole when the store recovers from an outage, so no request ever
/// uses a connection that died with the old server.
pub struct RedisStore {
    config: RedisConfig,
    live: ArcSwapOption<Live>,
    script: Arc<Script>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisStore({})", self.config.target)
    }
}

fn unavailable(e: impl fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedisStore {
    /// A store that is not connected yet; nothing touches the network here.
    pub fn new(config: RedisConfig) -> Result<RedisStore, StoreError> {
        // Validate the URLs now so a typo fails at startup, not at first use.
        for url in seeds(&config.target) {
            url.as_str().into_connection_info().map_err(|e| {
                StoreError::Unavailable(format!("invalid Redis address {}: {e}", mask(&url)))
            })?;
        }
        Ok(RedisStore {
            config,
            live: ArcSwapOption::empty(),
            script: Arc::new(Script::new(INCREMENT)),
        })
    }

    pub fn backend(&self) -> &'static str {
        match self.config.target {
            Target::Single(_) => "redis",
            Target::Cluster(_) => "redis-cluster",
        }
    }

    pub fn target(&self) -> &Target {
        &self.config.target
    }

    /// Opens fresh connections, proves them with the increment script on a
    /// probe key and swaps them in. A PING is not enough: a Redis that answers
    /// PING but refuses scripts (no EVALSHA permission, out of memory, a
    /// proxy answering garbage) would be taken back only to fail every
    /// request. Returns how long the script call took, so the caller can tell
    /// a Redis that answers from one that answers in time.
    pub async fn connect(&self) -> Result<Duration, StoreError> {
        let (live, rtt) = match &self.config.target {
            Target::Single(url) => {
                let manager = RedisConnectionManager::new(url.as_str()).map_err(unavailable)?;
                let pool = bb8::Pool::builder()
                    .max_size(self.config.pool_size.max(1))
                    .connection_timeout(self.config.connect_timeout)
                    // A PING per checkout would double every request's round trips.
                    .test_on_check_out(false)
                    .build_unchecked(manager);
                let mut conn = pool.get().await.map_err(unavailable)?.clone();
                let rtt = self.probe_script(&mut conn).await?;
                let in_flight = usize::try_from(self.config.pool_size).unwrap_or(1);
                (
                    Live::Single(Batcher::start(pool, self.script.clone(), in_flight)),
                    rtt,
                )
            }
            Target::Cluster(_) => {
                let client = redis::cluster::ClusterClient::builder(seeds(&self.config.target))
                    .connection_timeout(self.config.connect_timeout)
                    .build()
                    .map_err(unavailable)?;
                let mut conn = client.get_async_connection().await.map_err(unavailable)?;
                let rtt = self.probe_script(&mut conn).await?;
                // A PING reaches any node; a cluster short of a master (before
                // its replica takes over) still answers it, and would be
                // declared back only to fail again on that master's slots.
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
                (Live::Cluster(conn), rtt)
            }
        };
        self.live.store(Some(Arc::new(live)));
        Ok(rtt)
    }

    /// Adds nothing to a probe key through the increment script, as a request
    /// would, and checks the answer.
    async fn probe_script(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> Result<Duration, StoreError> {
        let started = std::time::Instant::now();
        let key = format!("{}sluice:probe", self.config.prefix);
        let raw: Vec<i64> = self
            .script
            .key(key)
            .arg(0)
            .arg(EXPIRY_SLACK_SECONDS)
            .invoke_async(conn)
            .await
            .map_err(|e| classify(&e))?;
        // Only ever incremented by 0, the probe key holds 0: a proxy or fake
        // that answers a fixed count is caught here.
        match raw.as_slice() {
            [0] => Ok(started.elapsed()),
            other => Err(StoreError::BadReply(format!(
                "probe script answered {other:?}"
            ))),
        }
    }

    /// Runs the increment script for the batch; counts come back in batch order.
    pub async fn increment(&self, batch: &[&Increment]) -> Result<Vec<u64>, StoreError> {
        let live = self
            .live
            .load_full()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
        let now = Now::wall();
        let keys: Vec<String> = batch.iter().map(|i| self.redis_key(i)).collect();
        match &*live {
            Live::Single(batcher) => {
                let args = batch.iter().map(|i| (i.hits, ttl(i, now))).collect();
                batcher.increment(keys, args).await
            }
            Live::Cluster(conn) => {
                let mut groups: Vec<(Slot, Vec<usize>)> = Vec::new();
                for (i, key) in keys.iter().enumerate() {
                    let slot = Slot::for_key(key);
                    match groups.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, idx)) => idx.push(i),
                        None => groups.push((slot, vec![i])),
                    }
                }
                let results = try_join_all(groups.iter().map(|(_, idx)| {
                    let mut conn = conn.clone();
                    let keys = &keys;
                    async move { self.run(&mut conn, batch, keys, idx, now).await }
                }))
                .await?;
                let mut counts = vec![0; batch.len()];
                for ((_, idx), group) in groups.iter().zip(results) {
                    for (i, count) in idx.iter().zip(group) {
                        if let Some(c) = counts.get_mut(*i) {
                            *c = count;
                        }
                    }
                }
                Ok(counts)
            }
        }
    }

    async fn run(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        batch: &[&Increment],
        keys: &[String],
        idx: &[usize],
        now: Now,
    ) -> Result<Vec<u64>, StoreError> {
        let mut inv = self.script.prepare_invoke();
        for (key, inc) in idx
            .iter()
            .filter_map(|&i| Some((keys.get(i)?, batch.get(i)?)))
        {
            inv.key(key).arg(inc.hits).arg(ttl(inc, now));
        }
        let raw: Vec<i64> = inv.invoke_async(conn).await.map_err(|e| classify(&e))?;
        super::same_length(raw.len(), idx.len())?;
        decode_counts(&raw)
    }

    /// The Redis key of one counter in one window.
    pub fn redis_key(&self, inc: &Increment) -> String {
        render_key(
            &self.config.prefix,
            self.config.key_format,
            &inc.key,
            inc.window.start.0,
            inc.window.unit.name(),
        )
    }
}

impl super::Primary for RedisStore {
    fn increment<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> super::BoxFuture<'a, Result<Vec<u64>, StoreError>> {
        Box::pin(RedisStore::increment(self, batch))
    }

    fn probe(&self) -> super::BoxFuture<'_, Result<Duration, StoreError>> {
        Box::pin(self.connect())
    }

    fn backend(&self) -> &'static str {
        RedisStore::backend(self)
    }

    fn describe(&self) -> String {
        self.config.target.to_string()
    }
}

/// Seconds a counter key lives from `now`.
fn ttl(inc: &Increment, now: Now) -> u64 {
    inc.window.seconds_until_reset(now) + EXPIRY_SLACK_SECONDS
}

/// Renders a counter key in `format`.
pub fn render_key(
    prefix: &str,
    format: KeyFormat,
    key: &CounterKey,
    window_start: u64,
    unit: &str,
) -> String {
    let (domain, entries) = key.parts();
    match format {
        KeyFormat::Sluice => {
            let digest = Sha256::digest(key.as_bytes());
            let mut s = String::with_capacity(prefix.len() + domain.len() + unit.len() + 56);
            s.push_str(prefix);
            s.push_str(domain);
            s.push(':');
            s.push_str(unit);
            s.push(':');
            let _ = write!(s, "{window_start}:");
            push_hex(&mut s, digest.get(..16).unwrap_or_default());
            s
        }
        KeyFormat::Envoyproxy => {
            let mut s = format!("{prefix}{domain}_");
            for (k, v) in entries {
                s.push_str(k);
                s.push('_');
                s.push_str(v);
                s.push('_');
            }
            s.push_str(&window_start.to_string());
            s
        }
    }
}

/// The URLs of a target: cluster seeds given as `host:port` inherit the
/// scheme and credentials of the first seed written as a URL.
fn seeds(target: &Target) -> Vec<String> {
    match target {
        Target::Single(url) => vec![url.clone()],
        Target::Cluster(seeds) => {
            let base = seeds
                .iter()
                .find_map(|s| {
                    s.split_once("://")
                        .map(|(scheme, rest)| (scheme, rest.rsplit_once('@').map(|(c, _)| c)))
                })
                .unwrap_or(("redis", None));
            seeds
                .iter()
                .map(|s| {
                    if s.contains("://") {
                        s.clone()
                    } else {
                        match base.1 {
                            Some(creds) => format!("{}://{creds}@{s}", base.0),
                            None => format!("{}://{s}", base.0),
                        }
                    }
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Unit, Window};

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            mask("rediss://app:s3cret@cache:6380/0"),
            "rediss://app:***@cache:6380/0"
        );
        assert_eq!(
            mask("redis://:s3cret@cache:6379"),
            "redis://:***@cache:6379"
        );
        assert_eq!(mask("redis://cache:6379"), "redis://cache:6379");
        let t = Target::Cluster(vec!["redis://u:p@a:7000".into(), "b:7001".into()]);
        assert!(!format!("{t} {t:?}").contains(":p@"));
    }

    #[test]
    fn cluster_seeds_inherit_scheme_and_credentials() {
        let t = Target::Cluster(vec!["rediss://u:p@a:7000".into(), "b:7001".into()]);
        assert_eq!(seeds(&t), ["rediss://u:p@a:7000", "rediss://u:p@b:7001"]);
        let t = Target::Cluster(vec!["a:7000".into(), "b:7001".into()]);
        assert_eq!(seeds(&t), ["redis://a:7000", "redis://b:7001"]);
    }

    #[test]
    fn key_formats() {
        let k = CounterKey::new("domain", Unit::Second, [("key", "value")]);
        let w = Window::containing(Unit::Second, Now(1234));
        assert_eq!(
            render_key("", KeyFormat::Envoyproxy, &k, w.start.0, "SECOND"),
            "domain_key_value_1234"
        );
        assert_eq!(
            render_key("prefix:", KeyFormat::Envoyproxy, &k, 1234, "SECOND"),
            "prefix:domain_key_value_1234"
        );
        let two = CounterKey::new(
            "domain",
            Unit::Minute,
            [("key2", "value2"), ("subkey2", "subvalue2")],
        );
        assert_eq!(
            render_key("", KeyFormat::Envoyproxy, &two, 1200, "MINUTE"),
            "domain_key2_value2_subkey2_subvalue2_1200"
        );
        let s = render_key("p:", KeyFormat::Sluice, &k, 1234, "SECOND");
        assert!(s.starts_with("p:domain:SECOND:1234:"), "{s}");
        assert_eq!(s.len(), "p:domain:SECOND:1234:".len() + 32);
        let email = CounterKey::new("d", Unit::Hour, [("email", "a@example.com")]);
        assert!(!render_key("", KeyFormat::Sluice, &email, 0, "HOUR").contains("example"));
        // Values that collide in the reference's format do not in sluice's.
        let a = CounterKey::new("d", Unit::Hour, [("a", "b_c")]);
        let b = CounterKey::new("d", Unit::Hour, [("a_b", "c")]);
        assert_eq!(
            render_key("", KeyFormat::Envoyproxy, &a, 0, "HOUR"),
            render_key("", KeyFormat::Envoyproxy, &b, 0, "HOUR")
        );
        assert_ne!(
            render_key("", KeyFormat::Sluice, &a, 0, "HOUR"),
            render_key("", KeyFormat::Sluice, &b, 0, "HOUR")
        );
    }
}
