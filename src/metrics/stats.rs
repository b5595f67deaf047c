//! The reference's per-rule counters and the latency histogram.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::limiter::StatDelta;

/// The per-rule counters of the reference (`total_hits`, `over_limit`, ...).
#[derive(Debug, Default)]
pub struct RuleStats {
    pub total_hits: AtomicU64,
    pub over_limit: AtomicU64,
    pub near_limit: AtomicU64,
    pub within_limit: AtomicU64,
    pub shadow_mode: AtomicU64,
    /// Quota mode: requests Envoys reported allowed and denied.
    pub quota_allowed: AtomicU64,
    pub quota_denied: AtomicU64,
    /// Quota mode: (Envoy, bucket) pairs reporting the rule to this instance.
    pub quota_envoys: AtomicI64,
    /// Quota mode: the rule's rate and the rate assigned to this instance's
    /// Envoys, in thousandths of a request per second.
    pub quota_limit_milli: AtomicU64,
    pub quota_assigned_milli: AtomicI64,
    /// A `detailed_metric` label set (kept when its rule leaves: bounded by
    /// `--max-detailed-metrics`), not a configured rule.
    pub(super) detailed: AtomicBool,
}

impl RuleStats {
    pub(super) fn mark_detailed(&self) {
        self.detailed.store(true, Relaxed);
    }

    pub(super) fn is_detailed(&self) -> bool {
        self.detailed.load(Relaxed)
    }

    pub fn add(&self, d: &StatDelta) {
        for (counter, n) in [
            (&self.total_hits, d.total_hits),
            (&self.over_limit, d.over_limit),
            (&self.near_limit, d.near_limit),
            (&self.within_limit, d.within_limit),
            (&self.shadow_mode, d.shadow_mode),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }
}

/// Upper bounds of the request latency histogram, in seconds.
pub(super) const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
];

#[derive(Debug, Default)]
pub(super) struct Histogram {
    pub(super) buckets: [AtomicU64; BUCKETS.len()],
    pub(super) count: AtomicU64,
    pub(super) sum_nanos: AtomicU64,
}

impl Histogram {
    /// The per-bucket counts (not cumulative), the count and the sum.
    pub(super) fn read(&self) -> ([u64; BUCKETS.len()], u64, u64) {
        (
            std::array::from_fn(|i| self.buckets.get(i).map_or(0, |b| b.load(Relaxed))),
            self.count.load(Relaxed),
            self.sum_nanos.load(Relaxed),
        )
    }

    pub(super) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(bucket) = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .and_then(|i| self.buckets.get(i))
        {
            bucket.fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_nanos
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }
}
