//! Quota mode's metrics: streams, skipped report entries, and per rule the
//! Envoys reporting it, what they allowed and denied, and the rate assigned.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::rules::{RuleTable, labels};
use super::{Metrics, RuleStats, encode};

/// Why a quota usage report (one bucket of it) was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    NoBucketId,
    Oversized,
    BadCounts,
    TooManyBuckets,
    /// The reporting peer holds `--quota-max-buckets-per-peer` already.
    PeerBuckets,
    UnknownDomain,
}

impl Skip {
    pub const ALL: [Skip; 6] = [
        Skip::NoBucketId,
        Skip::Oversized,
        Skip::BadCounts,
        Skip::TooManyBuckets,
        Skip::PeerBuckets,
        Skip::UnknownDomain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Skip::NoBucketId => "no_bucket_id",
            Skip::Oversized => "oversized",
            Skip::BadCounts => "bad_counts",
            Skip::TooManyBuckets => "too_many_buckets",
            Skip::PeerBuckets => "peer_buckets",
            Skip::UnknownDomain => "unknown_domain",
        }
    }
}

/// Quota mode's own counters; the per-rule ones live in each rule's
/// [`RuleStats`], read through the rule table at a scrape.
#[derive(Debug)]
pub(super) struct QuotaMetrics {
    streams: AtomicI64,
    /// Unix milliseconds until which the instance learns its fleets.
    learning_until_ms: AtomicU64,
    skipped: [AtomicU64; Skip::ALL.len()],
    deferred: AtomicU64,
    rules: Arc<RuleTable>,
}

impl QuotaMetrics {
    pub(super) fn new(rules: Arc<RuleTable>) -> QuotaMetrics {
        QuotaMetrics {
            streams: AtomicI64::default(),
            learning_until_ms: AtomicU64::default(),
            skipped: Default::default(),
            deferred: AtomicU64::default(),
            rules,
        }
    }
}

impl Metrics {
    /// A quota stream opened (`true`) or ended.
    pub fn quota_stream(&self, opened: bool) {
        self.quota
            .streams
            .fetch_add(if opened { 1 } else { -1 }, Relaxed);
    }

    /// The quota service learns its fleets for `period` from now.
    pub fn quota_learning(&self, period: std::time::Duration) {
        let until = crate::limiter::Now::wall_ms()
            .saturating_add(u64::try_from(period.as_millis()).unwrap_or(u64::MAX));
        self.quota.learning_until_ms.store(until, Relaxed);
    }

    /// Seconds the quota service still learns its fleets (0 once assigning).
    pub fn quota_learning_left(&self) -> f64 {
        let until = self.quota.learning_until_ms.load(Relaxed);
        until.saturating_sub(crate::limiter::Now::wall_ms()) as f64 / 1000.0
    }

    /// Quota streams open now.
    pub fn quota_streams(&self) -> i64 {
        self.quota.streams.load(Relaxed)
    }

    pub fn quota_skip(&self, why: Skip) {
        if let Some(c) = Skip::ALL
            .iter()
            .position(|s| *s == why)
            .and_then(|i| self.quota.skipped.get(i))
        {
            c.fetch_add(1, Relaxed);
        }
    }

    /// Store calls quota mode put off for want of budget.
    pub fn quota_deferred(&self, calls: u64) {
        self.quota.deferred.fetch_add(calls, Relaxed);
    }
}

/// How a per-rule series reads its value from a rule's counters.
#[derive(Clone, Copy)]
enum Read {
    Counter(fn(&RuleStats) -> u64),
    Count(fn(&RuleStats) -> i64),
    Rate(fn(&RuleStats) -> f64),
}

/// The per-rule series: name, help, and how to read it.
const PER_RULE: [(&str, &str, Read); 5] = [
    (
        "sluice_quota_envoys",
        "Envoys reporting a bucket of the rule to this instance (one per Envoy and bucket).",
        Read::Count(|s| s.quota_envoys.load(Relaxed)),
    ),
    (
        "sluice_quota_allowed",
        "Requests Envoys reported allowed under the rule's assignments.",
        Read::Counter(|s| s.quota_allowed.load(Relaxed)),
    ),
    (
        "sluice_quota_denied",
        "Requests Envoys reported denied under the rule's assignments.",
        Read::Counter(|s| s.quota_denied.load(Relaxed)),
    ),
    (
        "sluice_quota_assigned_per_second",
        "Requests per second assigned to this instance's Envoys under the rule (sum over buckets).",
        Read::Rate(|s| s.quota_assigned_milli.load(Relaxed) as f64 / 1000.0),
    ),
    (
        "sluice_quota_limit_per_second",
        "The rule's rate per bucket, requests per second.",
        Read::Rate(|s| s.quota_limit_milli.load(Relaxed) as f64 / 1000.0),
    ),
];

impl Collector for QuotaMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        encode::gauge(
            &mut enc,
            "sluice_quota_streams",
            "Quota (RLQS) streams open.",
            self.streams.load(Relaxed),
        )?;
        let left = self
            .learning_until_ms
            .load(Relaxed)
            .saturating_sub(crate::limiter::Now::wall_ms());
        encode::gauge(
            &mut enc,
            "sluice_quota_learning",
            "1 while the quota service learns its fleets after a start and assigns nothing.",
            i64::from(left > 0),
        )?;
        encode::counters(
            &mut enc,
            "sluice_quota_reports_skipped",
            "Bucket usage entries skipped, by reason.",
            Skip::ALL
                .iter()
                .zip(&self.skipped)
                .map(|(skip, c)| ([("reason", skip.name())], c.load(Relaxed))),
        )?;
        encode::counter(
            &mut enc,
            "sluice_quota_store_calls_deferred",
            "Quota-mode store calls put off by --quota-store-rate or --quota-stream-store-rate.",
            self.deferred.load(Relaxed),
        )?;
        // Only the rules Envoys ever reported to this instance.
        let rules = self.rules.snapshot();
        let seen: Vec<_> = rules
            .iter()
            .filter(|(_, s)| s.quota_limit_milli.load(Relaxed) > 0)
            .collect();
        for (name, help, read) in PER_RULE {
            let series = seen.iter().map(|(k, s)| (labels(k), &**s));
            match read {
                Read::Counter(f) => {
                    encode::counters(&mut enc, name, help, series.map(|(l, s)| (l, f(s))))
                }
                Read::Count(f) => {
                    encode::gauges(&mut enc, name, help, series.map(|(l, s)| (l, f(s))))
                }
                Read::Rate(f) => {
                    encode::gauges(&mut enc, name, help, series.map(|(l, s)| (l, f(s))))
                }
            }?;
        }
        Ok(())
    }
}
