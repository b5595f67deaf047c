//! Prometheus metrics. The request path bumps plain atomics; each component
//! (the service, the store, the listeners, quota mode, the bounds, the rule
//! table) owns its counters and registers one prometheus-client
//! [`Collector`](prometheus_client::collector::Collector) that reads them at
//! a scrape, encoded in the Prometheus text format (0.0.4).
//!
//! Rule counters are labelled by domain and rule path, never by a runtime value
//! unless the rule asks for `detailed_metric`; those labels are capped so a
//! flood of distinct values cannot grow memory without bound.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

/// Bounds on what runtime values can add to `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct MetricBounds {
    /// Distinct `detailed_metric` label sets kept before new ones are folded
    /// into the rule's own path (`--max-detailed-metrics`).
    pub detailed_sets: usize,
    /// Bytes of one `detailed_metric` rule label; a longer one is folded into
    /// the rule's own path (`--max-metric-label-bytes`).
    pub label_bytes: usize,
    /// Rules whose series one scrape shows (`--max-rule-series`): those
    /// with traffic, the busiest first.
    pub rule_series: usize,
    /// Rules that may keep a usage history at once (`--max-usage-rules`),
    /// each about 100 KiB once it has traffic.
    pub usage_rules: usize,
}

impl Default for MetricBounds {
    fn default() -> Self {
        MetricBounds {
            detailed_sets: 10_000,
            label_bytes: 256,
            rule_series: 10_000,
            usage_rules: 1_000,
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

/// Every metric sluice exports. Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Metrics {
    rules: Arc<RuleTable>,
    service: Arc<ServiceMetrics>,
    store: Arc<StoreMetrics>,
    /// Connections open, closed idle, failed accepts.
    conn: Arc<ConnMetrics>,
    /// Quota streams open, and report entries skipped by reason.
    quota: Arc<QuotaMetrics>,
    /// Bounds against hostile volume reached, by bound.
    bounds: Arc<BoundCounters>,
    /// Each component's collector, in the order of the exposition (locked
    /// only to register one, at start, and by a scrape).
    registry: Mutex<Registry>,
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Grpc,
    Admin,
}

impl Metrics {
    /// Metrics under other bounds than the defaults.
    pub fn with_limits(limits: MetricBounds) -> Metrics {
        let rules = Arc::new(RuleTable::new(limits));
        let service = Arc::new(ServiceMetrics::default());
        let store = Arc::new(StoreMetrics::default());
        let conn = Arc::new(ConnMetrics::default());
        let quota = Arc::new(QuotaMetrics::default());
        let bounds = Arc::new(BoundCounters::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(rules.clone()));
        registry.register_collector(Box::new(service.clone()));
        registry.register_collector(Box::new(store.clone()));
        registry.register_collector(Box::new(conn.clone()));
        registry.register_collector(Box::new(quota.clone()));
        registry.register_collector(Box::new(bounds.clone()));
        Metrics {
            rules,
            service,
            store,
            conn,
            quota,
            bounds,
            registry: Mutex::new(registry),
        }
    }

    /// The Prometheus text exposition (0.0.4) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        // Writing to a String does not fail; a collector never errs either.
        let _ = prometheus_text::encode(&mut out, &self.registry.lock());
        out
    }

    /// Adds a component's families, read at every scrape from then on.
    pub(crate) fn register(&self, collector: Box<dyn Collector>) {
        self.registry.lock().register_collector(collector);
    }

    /// The counters of a configured rule; the same `Arc` across reloads, so
    /// counters keep counting when the rules are swapped.
    pub fn rule(&self, domain: &str, path: &str) -> Arc<RuleStats> {
        self.rules.rule(domain, path)
    }

    /// The counters of a `detailed_metric` label set, or `fallback` once the
    /// cap on distinct label sets is reached or the label is too long.
    pub fn detailed(&self, domain: &str, path: &str, fallback: &Arc<RuleStats>) -> Arc<RuleStats> {
        self.rules.detailed(domain, path, fallback)
    }

    /// Drops the series of configured rules no longer in force (nothing
    /// but this table holds their counters): a management server changing
    /// rules every second cannot grow `/metrics` without bound.
    pub fn prune_rules(&self) {
        self.rules.prune();
    }

    /// Every rule's counters (and each `detailed_metric` label set's), by
    /// domain and path, for statsd.
    pub fn rule_snapshot(&self) -> Vec<(RuleKey, Arc<RuleStats>)> {
        self.rules.snapshot()
    }

    /// The service-level totals, for statsd.
    pub fn service_totals(&self) -> ServiceTotals {
        self.service.totals()
    }

    /// Every ShouldRateLimit call answered so far, whatever the answer.
    pub fn requests_total(&self) -> u64 {
        self.service.requests_total()
    }

    pub fn request(&self, outcome: Outcome, took: Duration) {
        self.service.request(outcome, took);
    }

    /// Global shadow mode let an over-limit request through.
    pub fn global_shadow_mode(&self) {
        self.service.global_shadow_mode();
    }

    pub fn domain_not_found(&self) {
        self.service.domain_not_found();
    }

    /// Records a config load: the new generation on success, an error otherwise.
    pub fn config_load(&self, result: Result<u64, ()>) {
        self.service.config_load(result);
    }

    /// Live in-memory counters and evictions so far (from the sweeper).
    pub fn counters(&self, live: u64, evictions: u64) {
        self.store.counters_live.store(live, Relaxed);
        self.store.counter_evictions.store(evictions, Relaxed);
    }

    /// A connection opened (`+1`) or closed (`-1`) on `listener`.
    pub fn connection(&self, listener: Listener, opened: bool) {
        let c = self.conn.open(listener);
        if opened {
            c.fetch_add(1, Relaxed);
        } else {
            c.fetch_sub(1, Relaxed);
        }
    }

    /// Connections open now on `listener`.
    pub fn open_connections(&self, listener: Listener) -> u64 {
        self.conn.open(listener).load(Relaxed)
    }

    /// A connection closed for being idle too long.
    pub fn idle_closed(&self) {
        self.conn.idle_closed.fetch_add(1, Relaxed);
    }

    /// A failed `accept` (out of descriptors and the like).
    pub fn accept_error(&self) {
        self.conn.accept_errors.fetch_add(1, Relaxed);
    }
}

mod bounds;
mod conn;
pub(crate) mod encode;
mod quota;
mod rules;
mod service;
mod stats;
mod store;

pub use crate::limiter::StatDelta;
use crate::rule_stats::RuleCounters;
pub use crate::rule_stats::RuleStats;
pub use crate::store::StoreCall;
pub use bounds::Bound;
use bounds::BoundCounters;
use conn::ConnMetrics;
use quota::QuotaMetrics;
pub use quota::Skip;
use rules::RuleTable;
use service::ServiceMetrics;
use store::StoreMetrics;

impl RuleCounters for Metrics {
    fn counters(&self, domain: &Arc<str>, path: &Arc<str>) -> Arc<RuleStats> {
        self.rules.shared(domain, path)
    }
}

impl crate::config::RulesObserver for Metrics {
    fn loaded(&self, outcome: Result<u64, ()>) {
        self.config_load(outcome);
    }

    fn xds_failed(&self) -> bool {
        self.bound_hit(Bound::XdsStreamFailed, 1)
    }

    fn xds_coalesced(&self) -> bool {
        self.bound_hit(Bound::XdsCoalesced, 1)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::with_limits(MetricBounds::default())
    }
}

pub(crate) use rules::RULE_COUNTERS;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
