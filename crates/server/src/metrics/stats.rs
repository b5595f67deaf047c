//! The latency histogram's buckets.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

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
