//! Quota mode's metrics: streams, skipped report entries, and per rule the
//! Envoys reporting it, what they allowed and denied, and the rate assigned.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::render::escape;
use super::{Metrics, RuleKey, RuleStats};

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

impl Metrics {
    /// A quota stream opened (`true`) or ended.
    pub fn quota_stream(&self, opened: bool) {
        self.quota_streams
            .fetch_add(if opened { 1 } else { -1 }, Relaxed);
    }

    /// Quota streams open now.
    pub fn quota_streams(&self) -> i64 {
        self.quota_streams.load(Relaxed)
    }

    pub fn quota_skip(&self, why: Skip) {
        if let Some(c) = Skip::ALL
            .iter()
            .position(|s| *s == why)
            .and_then(|i| self.quota_skipped.get(i))
        {
            c.fetch_add(1, Relaxed);
        }
    }

    /// Store calls quota mode put off for want of budget.
    pub fn quota_deferred(&self, calls: u64) {
        self.quota_deferred.fetch_add(calls, Relaxed);
    }

    /// Quota mode: per rule that Envoys ever reported to this instance, and
    /// the streams and skipped report entries.
    pub(super) fn render_quota(&self, out: &mut String, rules: &[(RuleKey, Arc<RuleStats>)]) {
        let _ = writeln!(
            out,
            "# HELP sluice_quota_streams Quota (RLQS) streams open.\n# TYPE sluice_quota_streams gauge\nsluice_quota_streams {}",
            self.quota_streams.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sluice_quota_reports_skipped_total Bucket usage entries skipped, by reason.\n# TYPE sluice_quota_reports_skipped_total counter"
        );
        for (skip, c) in Skip::ALL.iter().zip(&self.quota_skipped) {
            let _ = writeln!(
                out,
                "sluice_quota_reports_skipped_total{{reason=\"{}\"}} {}",
                skip.name(),
                c.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_quota_store_calls_deferred_total Quota-mode store calls put off by --quota-store-rate or --quota-stream-store-rate.\n# TYPE sluice_quota_store_calls_deferred_total counter\nsluice_quota_store_calls_deferred_total {}",
            self.quota_deferred.load(Relaxed)
        );
        let seen: Vec<_> = rules
            .iter()
            .filter(|(_, s)| s.quota_limit_milli.load(Relaxed) > 0)
            .collect();
        type Read = fn(&RuleStats) -> f64;
        let series: [(&str, &str, &str, Read); 5] = [
            (
                "sluice_quota_envoys",
                "gauge",
                "Envoys reporting a bucket of the rule to this instance (one per Envoy and bucket).",
                |s| s.quota_envoys.load(Relaxed) as f64,
            ),
            (
                "sluice_quota_allowed_total",
                "counter",
                "Requests Envoys reported allowed under the rule's assignments.",
                |s| s.quota_allowed.load(Relaxed) as f64,
            ),
            (
                "sluice_quota_denied_total",
                "counter",
                "Requests Envoys reported denied under the rule's assignments.",
                |s| s.quota_denied.load(Relaxed) as f64,
            ),
            (
                "sluice_quota_assigned_per_second",
                "gauge",
                "Requests per second assigned to this instance's Envoys under the rule (sum over buckets).",
                |s| s.quota_assigned_milli.load(Relaxed) as f64 / 1000.0,
            ),
            (
                "sluice_quota_limit_per_second",
                "gauge",
                "The rule's rate per bucket, requests per second.",
                |s| s.quota_limit_milli.load(Relaxed) as f64 / 1000.0,
            ),
        ];
        for (name, kind, help, read) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((domain, path), stats) in &seen {
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",rule=\"{}\"}} {}",
                    escape(domain),
                    escape(path),
                    read(stats)
                );
            }
        }
    }
}
