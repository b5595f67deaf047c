//! A token bucket's arithmetic (GCRA): the refill worked out once per rule,
//! and one step of taking or giving back tokens, run by the memory store
//! under its shard lock and by memcached's compare-and-swap loop; the Redis
//! script runs the same arithmetic.

use super::shape::Tally;

/// A token bucket's refill: microseconds per token, and the bucket's size in
/// microseconds (`burst` tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refill {
    pub interval_us: u64,
    pub tolerance_us: u64,
    /// `overdraft: true`: hits that do not fit are taken all the same (the
    /// request is still refused), the bucket going into debt that refill
    /// pays back; a charge made after its request ran is never lost.
    pub overdraft: bool,
}

/// The latest arrival time a bucket is given, in µs since the epoch: 2^53,
/// what the Redis script's numbers hold exactly (a debt of millennia).
pub const MAX_ARRIVAL_US: u64 = 1 << 53;

impl Refill {
    /// `rate` tokens per `window_seconds`, in a bucket of `burst`.
    pub fn new(rate: u32, window_seconds: u64, burst: u32) -> Refill {
        let interval_us =
            (window_seconds.saturating_mul(1_000_000) / u64::from(rate.max(1))).max(1);
        Refill {
            interval_us,
            tolerance_us: interval_us.saturating_mul(u64::from(burst)),
            overdraft: false,
        }
    }

    /// Whole tokens in the bucket when it is `debt_us` from full.
    pub fn tokens(&self, debt_us: u64) -> u64 {
        self.tolerance_us.saturating_sub(debt_us) / self.interval_us
    }

    /// Whole seconds (at least 1) until `hits` tokens are in a bucket that is
    /// `debt_us` from full.
    pub fn wait_seconds(&self, debt_us: u64, hits: u64) -> u64 {
        let need = debt_us
            .saturating_add(hits.saturating_mul(self.interval_us))
            .saturating_sub(self.tolerance_us);
        need.div_ceil(1_000_000).max(1)
    }

    /// One GCRA step: with the theoretical arrival time `tat_us` (0 for a new
    /// bucket) at `now_us`, take `hits` tokens if they are all there. Returns
    /// the new arrival time to store and what to report. The memory store
    /// runs it under its shard lock; the Redis script runs the same arithmetic.
    pub fn take(&self, tat_us: u64, now_us: u64, hits: u64) -> (u64, Tally) {
        let base = tat_us.max(now_us);
        let after = base
            .saturating_add(hits.saturating_mul(self.interval_us))
            .min(MAX_ARRIVAL_US);
        if after - now_us > self.tolerance_us && self.overdraft && hits > 0 {
            // Refused, and taken all the same: the debt is paid by refill.
            (
                after,
                Tally::Bucket {
                    taken: false,
                    debt_us: after - now_us,
                    asked: None,
                },
            )
        } else if after - now_us > self.tolerance_us {
            (
                tat_us,
                Tally::Bucket {
                    taken: false,
                    debt_us: base - now_us,
                    asked: None,
                },
            )
        } else {
            (
                after,
                Tally::Bucket {
                    taken: true,
                    debt_us: after - now_us,
                    asked: None,
                },
            )
        }
    }

    /// Gives `hits` tokens back to a bucket with arrival time `tat_us` at
    /// `now_us`: the arrival time moves back by their refill, never past
    /// now (a bucket holds at most `burst`). Returns the new arrival time
    /// and what to report.
    pub fn give_back(&self, tat_us: u64, now_us: u64, hits: u64) -> (u64, Tally) {
        let back = tat_us
            .saturating_sub(hits.saturating_mul(self.interval_us))
            .max(now_us)
            .min(tat_us.max(now_us));
        (
            back,
            Tally::Bucket {
                taken: true,
                debt_us: back - now_us,
                asked: None,
            },
        )
    }
}
