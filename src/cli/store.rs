//! Where counters live: Redis (one node, Cluster, Sentinel), memcached or
//! memory, and the failure policy around them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{Span, heading};

use super::parse_duration;
use crate::store::redis::KeyFormat;
use crate::store::{DEFAULT_MAX_COUNTERS, FailurePolicy, ResilientOptions};

/// `--key-format`'s values, as clap names them: the store's [`KeyFormat`]
/// (the stores know no command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeyFormatArg {
    /// `<prefix><domain>:<UNIT>:<window start>:<sha256 of domain, unit and
    /// entries>`: collision-free, and no descriptor value appears in clear.
    Sluice,
    /// envoyproxy/ratelimit's `<prefix><domain>_<k1>_<v1>_..._<window start>`,
    /// to share counters with a fleet of the reference during a migration.
    Envoyproxy,
}

impl From<KeyFormatArg> for KeyFormat {
    fn from(a: KeyFormatArg) -> KeyFormat {
        match a {
            KeyFormatArg::Sluice => KeyFormat::Sluice,
            KeyFormatArg::Envoyproxy => KeyFormat::Envoyproxy,
        }
    }
}

/// `--store-failure`'s values, as clap names them: the store's
/// [`FailurePolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FailurePolicyArg {
    /// Count in this process's memory: limits stay enforced per instance.
    Fallback,
    /// Admit.
    Allow,
    /// Answer OVER_LIMIT.
    Deny,
}

impl From<FailurePolicyArg> for FailurePolicy {
    fn from(a: FailurePolicyArg) -> FailurePolicy {
        match a {
            FailurePolicyArg::Fallback => FailurePolicy::Fallback,
            FailurePolicyArg::Allow => FailurePolicy::Allow,
            FailurePolicyArg::Deny => FailurePolicy::Deny,
        }
    }
}

/// Where counters live: memory (the default) or Redis.
#[derive(Args, Clone)]
pub struct StoreArgs {
    /// Count in Redis: redis://[user:pass@]host:port[/db], or rediss:// for TLS.
    // hide_env_values: the URL may carry a password; --help must not print it.
    #[arg(
        help_heading = heading::START,
        long,
        env = "SLUICE_REDIS_URL",
        hide_env_values = true,
        conflicts_with = "redis_cluster"
    )]
    pub(crate) redis_url: Option<String>,
    /// Count in a Redis Cluster: comma-separated seed nodes (host:port or URLs).
    #[arg(
        help_heading = heading::STORE,
        long,
        env = "SLUICE_REDIS_CLUSTER",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub(crate) redis_cluster: Vec<String>,
    /// Count in the Redis master that Sentinel names: MASTER@HOST:PORT[,HOST:PORT...]
    /// (sentinels may be URLs: the first one's scheme and credentials are the master's).
    #[arg(
        help_heading = heading::STORE,
        long,
        env = "SLUICE_REDIS_SENTINEL",
        hide_env_values = true,
        conflicts_with_all = ["redis_url", "redis_cluster"]
    )]
    pub(crate) redis_sentinel: Option<String>,
    /// Password of the sentinels themselves (REDIS_SENTINEL_AUTH).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    pub(crate) redis_sentinel_password: Option<String>,
    /// How often a connection to the Sentinel's master asks the sentinels
    /// whether it is still the master; a failover they announce
    /// (+switch-master) or an error of the connection asks at once.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_SENTINEL_RECHECK", default_value = "1s")]
    pub(crate) redis_sentinel_recheck: Span,
    /// Trust this CA (PEM) for rediss:// instead of the public roots (REDIS_TLS_CACERT).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_TLS_CA")]
    pub(crate) redis_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS to Redis (REDIS_TLS_CLIENT_CERT).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_TLS_CERT", requires = "redis_tls_key")]
    pub(crate) redis_tls_cert: Option<PathBuf>,
    /// The key of --redis-tls-cert (PEM) (REDIS_TLS_CLIENT_KEY).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    pub(crate) redis_tls_key: Option<PathBuf>,
    /// Count in memcached instead: host:port[,host:port...], keys spread over
    /// them (the reference's BACKEND_TYPE=memcache with MEMCACHE_HOST_PORT).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_MEMCACHE_SERVERS", value_delimiter = ',', conflicts_with_all = ["redis_url", "redis_cluster", "redis_sentinel"])]
    pub(crate) memcache_servers: Vec<String>,
    /// Connections in the Redis pool (each one multiplexed).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_POOL_SIZE", default_value_t = 4)]
    pub(crate) redis_pool_size: u32,
    /// Script calls to a Redis Cluster in flight at once; past it a request
    /// waits for one to finish, within its store wait. A call whose request
    /// gave up still runs to its answer (so a slow Cluster is heard
    /// answering), so this is what bounds a flood's calls; a call
    /// unanswered for 2 s gives its place back.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_CLUSTER_MAX_IN_FLIGHT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) redis_cluster_max_in_flight: u32,
    /// Run the Redis connections and the batcher (a Cluster's connections
    /// and calls) on a thread of their own,
    /// so a flood queued on the workers is never timed as a slow Redis.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_REDIS_IO_THREAD", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) redis_io_thread: bool,
    /// Longest wait for Redis per request before the failure policy decides.
    #[arg(help_heading = heading::FAILURE, long, env = "SLUICE_REDIS_TIMEOUT", default_value = "20ms", value_parser = parse_duration)]
    pub(crate) redis_timeout: Duration,
    /// Prepended to every Redis key.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_CACHE_KEY_PREFIX", default_value = "")]
    pub(crate) cache_key_prefix: String,
    /// Redis key layout: sluice (collision-free, values hashed) or envoyproxy
    /// (the reference's keys, to share counters during a migration).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_KEY_FORMAT", value_enum, default_value_t = KeyFormatArg::Sluice)]
    pub(crate) key_format: KeyFormatArg,
    /// What decides when Redis fails or times out.
    #[arg(help_heading = heading::START, long, env = "SLUICE_STORE_FAILURE", value_enum, default_value_t = FailurePolicyArg::Fallback)]
    pub(crate) store_failure: FailurePolicyArg,
    /// Counters remembered as over their limit (answered without Redis); 0 disables.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_LOCAL_CACHE_SIZE", default_value_t = 100_000)]
    pub(crate) local_cache_size: usize,
    /// Counters held in memory (the memory store, or the fallback while Redis
    /// is down); when full, the least spent are dropped first.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_MAX_COUNTERS", default_value_t = DEFAULT_MAX_COUNTERS)]
    pub(crate) max_counters: usize,
    /// Answer hot fixed-window counters far from their limit from chunks of
    /// the limit leased from the shared store, never over the limit; false
    /// asks the store for every request (a rule opts out with
    /// `leased_allowance: false`). Always off under `--key-format
    /// envoyproxy`, whose keys a reference fleet reads as the hits.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_LEASED_ALLOWANCE", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) leased_allowance: bool,
    /// Counters that may hold leased allowance at once; when full, a new
    /// counter takes the place of one with nothing leased left (of a few
    /// looked at), or is not remembered; 0 turns leasing off.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_ALLOWANCE_KEYS", default_value_t = 100_000)]
    pub(crate) allowance_keys: usize,
    /// The largest chunk of a limit leased at once (also at most an eighth
    /// of what is left of the limit); under 2 turns leasing off.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_ALLOWANCE_MAX_CHUNK", default_value_t = 4096)]
    pub(crate) allowance_max_chunk: u64,
    /// Renew a lease before it runs out (or its half second of trust
    /// lapses), in the background, ahead by three of the store's measured
    /// round trips at the key's rate, so a hot key never waits for a far
    /// store; false renews it only when it has run out, with a request
    /// waiting.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_ALLOWANCE_AHEAD", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) allowance_ahead: bool,
    /// A key's credit under `count_after` (or --count-after), in percent of
    /// its limit (at least one hit): the hits an instance answers before the
    /// store has counted them, so a key may pass its limit by up to
    /// instances x credit a window; 0 turns counting after off.
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_COUNT_AFTER_CREDIT", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub(crate) count_after_credit: u64,
    /// How long hits answered on credit wait to be counted in the store, in
    /// one call with the others due (at once when a key's credit is spent).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_COUNT_AFTER_INTERVAL", default_value = "50ms", value_parser = parse_duration)]
    pub(crate) count_after_interval: Duration,
    /// Counters answered on credit in a window; when full, a new counter
    /// takes the exact path (none is dropped before its window ends).
    #[arg(help_heading = heading::STORE, long, env = "SLUICE_COUNT_AFTER_KEYS", default_value_t = 100_000)]
    pub(crate) count_after_keys: usize,
}

impl StoreArgs {
    /// Whether hot counters may be answered from leased allowance. Never
    /// under `--key-format envoyproxy`: a lease counts its whole chunk in the
    /// shared key ahead of the hits, and a reference instance reading that
    /// key during a migration would refuse early. Its counters hold the hits.
    pub(crate) fn leases_allowance(&self) -> bool {
        self.leased_allowance && self.key_format != KeyFormatArg::Envoyproxy
    }

    /// Whether the store leases allowance: a shared store, leasing on and
    /// given room to lease.
    pub(crate) fn leases(&self) -> bool {
        self.shared()
            && self.leases_allowance()
            && self.allowance_keys > 0
            && self.allowance_max_chunk >= 2
    }

    /// Whether the store is shared (not the memory store).
    pub(crate) fn shared(&self) -> bool {
        self.redis_url.is_some()
            || !self.redis_cluster.is_empty()
            || self.redis_sentinel.is_some()
            || !self.memcache_servers.is_empty()
    }

    pub(crate) fn resilient_options(&self) -> ResilientOptions {
        ResilientOptions {
            policy: self.store_failure.into(),
            timeout: self.redis_timeout,
            cache_size: self.local_cache_size,
            max_counters: self.max_counters,
            allowance_keys: if self.leases_allowance() {
                self.allowance_keys
            } else {
                0
            },
            allowance_max_chunk: self.allowance_max_chunk,
            allowance_ahead: self.allowance_ahead,
            count_after_keys: self.count_after_keys,
            count_after_credit: self.count_after_credit,
            count_after_interval: self.count_after_interval,
        }
    }
}
