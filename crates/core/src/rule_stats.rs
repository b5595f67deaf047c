//! The counters one rule counts into: the reference's per-rule counters
//! (`total_hits`, `over_limit`, ...) and refunds. A compiled rule holds
//! its own; the metrics' rule table hands out the same ones across reloads,
//! and observation (Prometheus, statsd, the console) reads them from there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::limiter::StatDelta;

/// The per-rule counters of the reference (`total_hits`, `over_limit`, ...).
#[derive(Debug, Default)]
pub struct RuleStats {
    pub total_hits: AtomicU64,
    pub over_limit: AtomicU64,
    pub near_limit: AtomicU64,
    pub within_limit: AtomicU64,
    pub shadow_mode: AtomicU64,
    /// Hits given back by refunds (`is_negative_hits`).
    pub refunded: AtomicU64,
    /// How keys used the rule lately (`/api/usage`, `sluice advise`).
    pub usage: crate::usage::Usage,
    /// A `detailed_metric` label set (kept when its rule leaves: bounded by
    /// `--max-detailed-metrics`), not a configured rule.
    detailed: AtomicBool,
}

impl RuleStats {
    /// Counters whose usage history joins `budget` (`--max-usage-rules`).
    pub fn within(budget: Arc<crate::usage::UsageBudget>) -> RuleStats {
        RuleStats {
            usage: crate::usage::Usage::within(budget),
            ..RuleStats::default()
        }
    }

    pub fn mark_detailed(&self) {
        self.detailed.store(true, Relaxed);
    }

    pub fn is_detailed(&self) -> bool {
        self.detailed.load(Relaxed)
    }

    pub fn add(&self, d: &StatDelta) {
        for (counter, n) in [
            (&self.total_hits, d.total_hits),
            (&self.over_limit, d.over_limit),
            (&self.near_limit, d.near_limit),
            (&self.within_limit, d.within_limit),
            (&self.shadow_mode, d.shadow_mode),
            (&self.refunded, d.refunded),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }
}

/// Where compiled rules get their counters, so config compiles without
/// knowing metrics: the server hands the metrics' rule table (the same
/// counters across reloads); a load that only checks hands [`Detached`].
pub trait RuleCounters {
    /// The counters of the rule at `path` in `domain`. Shared strings, so
    /// a table that keeps the counters keys them by the rule's own path
    /// instead of a copy (a million rules, a million strings fewer).
    fn counters(&self, domain: &Arc<str>, path: &Arc<str>) -> Arc<RuleStats>;
}

/// Fresh counters for every rule, kept by nothing but the rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct Detached;

impl RuleCounters for Detached {
    fn counters(&self, _domain: &Arc<str>, _path: &Arc<str>) -> Arc<RuleStats> {
        Arc::default()
    }
}
