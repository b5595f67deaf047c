//! Prometheus metrics, rendered by hand in the text format: a handful of
//! counters and one histogram do not need a metrics framework.
//!
//! Rule counters are labelled by domain and rule path, never by a runtime value
//! unless the rule asks for `detailed_metric`; those labels are capped so a
//! flood of distinct values cannot grow memory without bound.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;

/// Bounds on what runtime values can add to `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct MetricBounds {
    /// Distinct `detailed_metric` label sets kept before new ones are folded
    /// into the rule's own path (`--max-detailed-metrics`).
    pub detailed_sets: usize,
    /// Bytes of one `detailed_metric` rule label; a longer one is folded into
    /// the rule's own path (`--max-metric-label-bytes`).
    pub label_bytes: usize,
    /// Slots of the console's top over-limit keys (`--console-top-keys`).
    pub top_keys: usize,
    /// Show client addresses in the top keys (`--console-show-addresses`).
    pub show_addresses: bool,
}

impl Default for MetricBounds {
    fn default() -> Self {
        MetricBounds {
            detailed_sets: 10_000,
            label_bytes: 256,
            top_keys: 64,
            show_addresses: false,
        }
    }
}

/// The outcome of one `ShouldRateLimit` call, for the request counter.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Ok,
    OverLimit,
    Invalid,
    /// No decision: the store failed and no policy decided, or sluice shed
    /// the request (UNAVAILABLE).
    Unavailable,
}

/// Domain and rule path; shared, so a scrape copies pointers, not text.
pub type RuleKey = (Arc<str>, Arc<str>);

/// Service-level counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceTotals {
    pub requests: u64,
    pub latency_count: u64,
    pub latency_nanos: u64,
    pub config_loads: u64,
    pub config_load_errors: u64,
    pub global_shadow_mode: u64,
    pub domain_not_found: u64,
}
/// Rule counters by domain, then by rule path (two levels, so a lookup
/// borrows the request's strings instead of allocating a key).
type RuleMap = BTreeMap<Arc<str>, BTreeMap<Arc<str>, Arc<RuleStats>>>;

/// Every metric sluice exports. Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Metrics {
    limits: MetricBounds,
    /// The descriptors most often over their limit lately (the console).
    pub top_keys: TopKeys,
    rules: Mutex<RuleMap>,
    /// Distinct `detailed_metric` label sets so far (changed under `rules`).
    detailed: AtomicUsize,
    requests_ok: AtomicU64,
    requests_over: AtomicU64,
    requests_invalid: AtomicU64,
    requests_unavailable: AtomicU64,
    latency: Histogram,
    domain_not_found: AtomicU64,
    global_shadow_mode: AtomicU64,
    config_loads: AtomicU64,
    config_load_errors: AtomicU64,
    config_generation: AtomicU64,
    store: StoreMetrics,
    /// Connections refused or closed by a bound, by listener and reason.
    conn: ConnMetrics,
    /// Quota streams open, and report entries skipped by reason.
    quota_streams: AtomicI64,
    quota_skipped: [AtomicU64; Skip::ALL.len()],
    quota_deferred: AtomicU64,
    /// Bounds against hostile volume reached, by bound.
    bounds: BoundCounters,
}

#[derive(Debug, Default)]
struct ConnMetrics {
    grpc_open: AtomicU64,
    admin_open: AtomicU64,
    idle_closed: AtomicU64,
    accept_errors: AtomicU64,
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Grpc,
    Admin,
}

/// How a call to the shared store ended.
#[derive(Debug, Clone, Copy)]
pub enum StoreCall {
    Ok,
    Timeout,
    Error,
    /// The store refused one request's counter (not a store fault).
    Rejected,
}

#[derive(Debug, Default)]
struct StoreMetrics {
    latency: Histogram,
    timeouts: AtomicU64,
    errors: AtomicU64,
    rejected: AtomicU64,
    trips: AtomicU64,
    counters_live: AtomicU64,
    counter_evictions: AtomicU64,
    /// Descriptors decided by each failure policy: fallback, allow, deny.
    policy_decisions: [AtomicU64; 3],
    circuit_open: AtomicU64,
    local_cache_hits: AtomicU64,
}

impl Metrics {
    /// Metrics under other bounds than the defaults.
    pub fn with_limits(limits: MetricBounds) -> Metrics {
        Metrics {
            limits,
            top_keys: TopKeys::new(limits.top_keys, limits.show_addresses),
            rules: Mutex::default(),
            detailed: AtomicUsize::default(),
            requests_ok: AtomicU64::default(),
            requests_over: AtomicU64::default(),
            requests_invalid: AtomicU64::default(),
            requests_unavailable: AtomicU64::default(),
            latency: Histogram::default(),
            domain_not_found: AtomicU64::default(),
            global_shadow_mode: AtomicU64::default(),
            config_loads: AtomicU64::default(),
            config_load_errors: AtomicU64::default(),
            config_generation: AtomicU64::default(),
            store: StoreMetrics::default(),
            conn: ConnMetrics::default(),
            quota_streams: AtomicI64::default(),
            quota_skipped: Default::default(),
            quota_deferred: AtomicU64::default(),
            bounds: BoundCounters::default(),
        }
    }

    /// The counters of a configured rule; the same `Arc` across reloads, so
    /// counters keep counting when the rules are swapped.
    pub fn rule(&self, domain: &str, path: &str) -> Arc<RuleStats> {
        self.rules
            .lock()
            .entry(domain.into())
            .or_default()
            .entry(path.into())
            .or_default()
            .clone()
    }

    /// The counters of a `detailed_metric` label set, or `fallback` once the
    /// cap on distinct label sets is reached or the label is too long.
    pub fn detailed(&self, domain: &str, path: &str, fallback: &Arc<RuleStats>) -> Arc<RuleStats> {
        if path.len() > self.limits.label_bytes {
            return fallback.clone();
        }
        let mut rules = self.rules.lock();
        // Borrowed lookup first: a known label set allocates nothing.
        if let Some(s) = rules.get(domain).and_then(|paths| paths.get(path)) {
            return s.clone();
        }
        if self.detailed.load(Relaxed) >= self.limits.detailed_sets {
            return fallback.clone();
        }
        self.detailed.fetch_add(1, Relaxed);
        let stats = rules
            .entry(domain.into())
            .or_default()
            .entry(path.into())
            .or_default()
            .clone();
        stats.detailed.store(true, Relaxed);
        stats
    }

    /// Drops the series of configured rules no longer in force (nothing
    /// but this table holds their counters): a management server changing
    /// rules every second cannot grow `/metrics` without bound.
    pub fn prune_rules(&self) {
        let mut rules = self.rules.lock();
        for paths in rules.values_mut() {
            paths.retain(|_, s| Arc::strong_count(s) > 1 || s.detailed.load(Relaxed));
        }
        rules.retain(|_, paths| !paths.is_empty());
    }

    /// Every rule's counters (and each `detailed_metric` label set's), by
    /// domain and path. Copies pointers under the lock and lets go: requests
    /// that look up a rule's counters never wait for a scrape or a flush.
    pub fn rule_snapshot(&self) -> Vec<(RuleKey, Arc<RuleStats>)> {
        self.rules
            .lock()
            .iter()
            .flat_map(|(domain, paths)| {
                paths
                    .iter()
                    .map(|(path, v)| ((domain.clone(), path.clone()), v.clone()))
            })
            .collect()
    }

    /// The service-level totals, for statsd.
    pub fn service_totals(&self) -> ServiceTotals {
        ServiceTotals {
            requests: self.requests_total(),
            latency_count: self.latency.count.load(Relaxed),
            latency_nanos: self.latency.sum_nanos.load(Relaxed),
            config_loads: self.config_loads.load(Relaxed),
            config_load_errors: self.config_load_errors.load(Relaxed),
            global_shadow_mode: self.global_shadow_mode.load(Relaxed),
            domain_not_found: self.domain_not_found.load(Relaxed),
        }
    }

    /// Every ShouldRateLimit call answered so far, whatever the answer.
    pub fn requests_total(&self) -> u64 {
        self.requests_ok.load(Relaxed)
            + self.requests_over.load(Relaxed)
            + self.requests_invalid.load(Relaxed)
            + self.requests_unavailable.load(Relaxed)
    }

    pub fn request(&self, outcome: Outcome, took: Duration) {
        let c = match outcome {
            Outcome::Ok => &self.requests_ok,
            Outcome::OverLimit => &self.requests_over,
            Outcome::Invalid => &self.requests_invalid,
            Outcome::Unavailable => &self.requests_unavailable,
        };
        c.fetch_add(1, Relaxed);
        self.latency.observe(took);
    }

    /// Global shadow mode let an over-limit request through.
    pub fn global_shadow_mode(&self) {
        self.global_shadow_mode.fetch_add(1, Relaxed);
    }

    pub fn domain_not_found(&self) {
        self.domain_not_found.fetch_add(1, Relaxed);
    }

    /// Records a config load: the new generation on success, an error otherwise.
    pub fn config_load(&self, result: Result<u64, ()>) {
        match result {
            Ok(generation) => {
                self.config_loads.fetch_add(1, Relaxed);
                self.config_generation.store(generation, Relaxed);
            }
            Err(()) => {
                self.config_load_errors.fetch_add(1, Relaxed);
            }
        }
    }

    /// Records one call to the shared store (Redis).
    pub fn store_call(&self, call: StoreCall, took: Duration) {
        let st = &self.store;
        st.latency.observe(took);
        match call {
            StoreCall::Ok => {}
            StoreCall::Timeout => {
                st.timeouts.fetch_add(1, Relaxed);
            }
            StoreCall::Error => {
                st.errors.fetch_add(1, Relaxed);
            }
            StoreCall::Rejected => {
                st.rejected.fetch_add(1, Relaxed);
            }
        }
    }

    /// Records that the breaker opened; `total` is its opens since start.
    pub fn circuit_trip(&self, total: u64) {
        self.store.trips.store(total, Relaxed);
    }

    /// Live in-memory counters and evictions so far (from the sweeper).
    pub fn counters(&self, live: u64, evictions: u64) {
        self.store.counters_live.store(live, Relaxed);
        self.store.counter_evictions.store(evictions, Relaxed);
    }

    /// A connection opened (`+1`) or closed (`-1`) on `listener`.
    pub fn connection(&self, listener: Listener, opened: bool) {
        let c = match listener {
            Listener::Grpc => &self.conn.grpc_open,
            Listener::Admin => &self.conn.admin_open,
        };
        if opened {
            c.fetch_add(1, Relaxed);
        } else {
            c.fetch_sub(1, Relaxed);
        }
    }

    /// Connections open now on `listener`.
    pub fn open_connections(&self, listener: Listener) -> u64 {
        match listener {
            Listener::Grpc => self.conn.grpc_open.load(Relaxed),
            Listener::Admin => self.conn.admin_open.load(Relaxed),
        }
    }

    /// A connection closed for being idle too long.
    pub fn idle_closed(&self) {
        self.conn.idle_closed.fetch_add(1, Relaxed);
    }

    /// A failed `accept` (out of descriptors and the like).
    pub fn accept_error(&self) {
        self.conn.accept_errors.fetch_add(1, Relaxed);
    }

    /// Counts descriptors decided by a failure policy (the server's, or a
    /// rule's `on_store_failure`).
    pub fn policy_decisions(&self, policy: &str, n: u64) {
        let i = match policy {
            "allow" => 1,
            "deny" => 2,
            _ => 0,
        };
        if let Some(c) = self.store.policy_decisions.get(i) {
            c.fetch_add(n, Relaxed);
        }
    }

    /// Records whether the store's circuit breaker is open.
    pub fn circuit(&self, open: bool) {
        self.store.circuit_open.store(u64::from(open), Relaxed);
    }

    /// Counts descriptors answered from the local over-limit cache.
    pub fn local_cache_hits(&self, n: u64) {
        self.store.local_cache_hits.fetch_add(n, Relaxed);
    }
}

mod address;
mod bounds;
mod quota;
mod render;
mod stats;
mod top;

pub use crate::limiter::StatDelta;
pub use bounds::Bound;
use bounds::BoundCounters;
pub use quota::Skip;
use stats::Histogram;
pub use stats::RuleStats;
pub use top::{
    MAX_TEXT as TOP_KEY_BYTES, TopKey, TopKeys, WINDOW_SECONDS as TOP_KEYS_WINDOW_SECONDS,
};

impl Default for Metrics {
    fn default() -> Self {
        Metrics::with_limits(MetricBounds::default())
    }
}

pub(crate) use render::RULE_COUNTERS;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
