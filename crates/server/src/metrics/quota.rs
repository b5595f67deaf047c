//! Quota mode's service-wide metrics: streams, learning, skipped report
//! entries and deferred store calls. Its per-rule numbers are quota's own
//! (`quota/stats.rs`), registered by the quota service.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{Metrics, encode};

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

/// Quota mode's service-wide counters.
#[derive(Debug, Default)]
pub(super) struct QuotaMetrics {
    streams: AtomicI64,
    /// Unix milliseconds until which the instance learns its fleets.
    learning_until_ms: AtomicU64,
    skipped: [AtomicU64; Skip::ALL.len()],
    deferred: AtomicU64,
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
        Ok(())
    }
}
