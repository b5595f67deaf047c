//! One bucket's entry of a usage report, checked before it costs anything:
//! a bucket id within its bounds, and counts an Envoy could really have.

use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;

use crate::metrics::Skip;

/// Bytes of one bucket id key or value; a longer one is skipped.
const MAX_TEXT: usize = 1024;
/// Bytes of a whole bucket id, keys and values (as `--max-descriptor-bytes`
/// bounds a descriptor): what one bucket can cost a stream's memory.
const MAX_BUCKET_BYTES: usize = 4096;
/// Requests per second no Envoy can really have offered to one bucket: a
/// report claiming more is garbage, skipped. A report covering less than a
/// second may hold a second's worth (Envoy reports whole seconds, and 0 on
/// a bucket's first report).
const MAX_RATE: f64 = 1e7;
/// Seconds a report may cover.
const MAX_ELAPSED: f64 = 1e7;
/// Seconds a report must cover to measure a rate: `time_elapsed` may be
/// sub-second (a client reporting every 100 ms), but below a millisecond a
/// count says nothing of a rate.
const MIN_MEASURED: f64 = 1e-3;

/// Requests offered to a bucket and the seconds they came in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::quota) struct Measured {
    pub requests: u64,
    pub seconds: f64,
    /// `time_elapsed` held no nanoseconds: perhaps cut down to the second,
    /// as Envoy 1.40 sends it.
    pub whole_seconds: bool,
}

/// A checked entry.
pub(super) struct Usage {
    pub id: BucketId,
    /// Requests allowed and denied since the last report.
    pub offered: (u64, u64),
    /// Seconds the counts cover.
    pub elapsed: f64,
    /// Requests offered and the seconds they came in, when measured; none
    /// on a first report (Envoy sends 0 then).
    pub measured: Option<Measured>,
}

impl Usage {
    /// The entry, or why it is skipped.
    pub(super) fn check(usage: BucketQuotaUsage) -> Result<Usage, Skip> {
        let id = usage.bucket_id.ok_or(Skip::NoBucketId)?;
        if id.bucket.is_empty() {
            return Err(Skip::NoBucketId);
        }
        let bytes: usize = id.bucket.iter().map(|(k, v)| k.len() + v.len()).sum();
        if id.bucket.len() > crate::config::MAX_BUCKET_ENTRIES
            || bytes > MAX_BUCKET_BYTES
            || id
                .bucket
                .iter()
                .any(|(k, v)| k.len() > MAX_TEXT || v.len() > MAX_TEXT)
        {
            return Err(Skip::Oversized);
        }
        let (elapsed, nanos) = usage.time_elapsed.map_or((0.0, 0), |d| {
            (d.seconds as f64 + f64::from(d.nanos) / 1e9, d.nanos)
        });
        let offered = (usage.num_requests_allowed, usage.num_requests_denied);
        let requests = offered.0.saturating_add(offered.1);
        let measured = (elapsed >= MIN_MEASURED).then_some(Measured {
            requests,
            seconds: elapsed,
            whole_seconds: nanos == 0,
        });
        if !(0.0..=MAX_ELAPSED).contains(&elapsed) || requests as f64 > MAX_RATE * elapsed.max(1.0)
        {
            return Err(Skip::BadCounts);
        }
        Ok(Usage {
            id,
            offered,
            elapsed,
            measured,
        })
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
