//! Limit shapes beyond the fixed window: what a store reports for each, and
//! how that becomes a decision. Pure: the store has already counted (or, for
//! a token bucket, already taken or refused), so this only reads numbers.
//!
//! - **Fixed window**: the count in the epoch-aligned window.
//! - **Sliding window**: the two-window estimate, the previous window's count
//!   weighted by the share of it still inside the sliding window, plus this
//!   window's count. It assumes the previous window's hits were spread evenly;
//!   hits bunched at the end of the previous window are under-weighted, so
//!   over one sliding window it can admit up to about twice the limit in the
//!   worst case (all of the previous window's budget in its last moment, then
//!   the estimate's weight on it falling as fast as time passes), against the
//!   fixed window's 2x at every boundary. For traffic that is anything but
//!   adversarially timed it stays within a few percent.
//! - **Token bucket** (GCRA, [`Refill`]): `requests_per_unit` tokens per
//!   window refill continuously into a bucket of `burst`; a request takes
//!   `hits` tokens or, if they are not all there, nothing (or, with
//!   `overdraft`, all of them into debt). The store keeps the theoretical
//!   arrival time and reports how far the bucket is from full.

use super::refill::Refill;

/// How a rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    #[default]
    FixedWindow,
    SlidingWindow,
    TokenBucket {
        /// Capacity in tokens (`burst`, default `requests_per_unit`).
        burst: u32,
        /// The refill of the rule's rate into the bucket, worked out once
        /// when the rule compiles (see [`Algorithm::token_bucket`]).
        refill: Refill,
    },
    /// Requests in flight: at most `requests_per_unit` slots held at once,
    /// each released when its request ends or, failing that, after the
    /// period (its lease).
    Concurrency,
}

impl Algorithm {
    /// This token bucket with `overdraft: true` (any other shape as it is).
    pub fn with_overdraft(self) -> Algorithm {
        match self {
            Algorithm::TokenBucket { burst, mut refill } => {
                refill.overdraft = true;
                Algorithm::TokenBucket { burst, refill }
            }
            other => other,
        }
    }

    /// A token bucket of `burst` refilled at `rate` tokens per `window_seconds`.
    pub fn token_bucket(rate: u32, window_seconds: u64, burst: u32) -> Algorithm {
        Algorithm::TokenBucket {
            burst,
            refill: Refill::new(rate, window_seconds, burst),
        }
    }

    /// A token bucket's refill; `None` for a window.
    pub fn refill(self) -> Option<Refill> {
        match self {
            Algorithm::TokenBucket { refill, .. } => Some(refill),
            _ => None,
        }
    }

    /// The name used in rule files, `/rlconfig` and `sluice check`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket { .. } => "token_bucket",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// A small tag that keeps the counters of different shapes apart.
    pub fn tag(self) -> u8 {
        match self {
            Algorithm::FixedWindow => 0,
            Algorithm::SlidingWindow => 1,
            Algorithm::TokenBucket { .. } => 2,
            Algorithm::Concurrency => 3,
        }
    }
}

/// What a store reports for one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    /// Fixed window: the count after adding.
    Count(u64),
    /// Sliding window: this window's count after adding, and the previous
    /// window's count.
    Sliding { current: u64, previous: u64 },
    /// Token bucket: whether the hits were taken, how far the bucket is
    /// from full afterwards, in microseconds of refill, and the tokens its
    /// key has asked for in the current window so far, taken or not (the
    /// usage the advisor reads; `None` when the store could not say).
    Bucket {
        taken: bool,
        debt_us: u64,
        asked: Option<u64>,
    },
    /// Concurrency: the slots held after taking one (one past the limit
    /// when none was free), and, for a take, the most its key held at once
    /// earlier in the current window (`None` for a release, a look, or a
    /// store that could not say).
    Slots { held: u64, peak: Option<u64> },
    /// A fixed window's count after adding, in the store's window where
    /// that is not the one asked: the store's clock put the request across
    /// a boundary from the instance's. Judged as its count; never leased
    /// from or remembered for the window asked.
    Moved(u64),
    /// The store did not count: a failure policy decided instead.
    Decided(Decision),
    /// A fixed window's position answered from this instance's leased
    /// allowance: judged as its count. Its hits crossed the usage levels
    /// when the chunk was taken (the store tells the usage then), so the
    /// answer crosses none.
    Leased(u64),
    /// A fixed window's count answered from the local over-limit cache:
    /// the count it remembered plus the hits (the store was not asked, so
    /// the count is this instance's view, not the fleet's).
    Remembered(u64),
}

/// What a failure policy decided for a counter the store could not count
/// (`--store-failure`, a rule's `on_store_failure`), or for a count that
/// never came back (refused: a missing count must never admit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Admit,
    Refuse,
}

impl Decision {
    /// The counter this verdict reads as, for the status and its metrics:
    /// admitted as an empty counter; refused as one over by exactly the
    /// hits (so over-limit metrics stay truthful) or an empty bucket.
    pub(super) fn as_counted(self, algorithm: Algorithm, limit: u32, hits: u64) -> Tally {
        let over = u64::from(limit).saturating_add(hits.max(1));
        let admit = self == Decision::Admit;
        match algorithm {
            Algorithm::FixedWindow => Tally::Count(if admit { 0 } else { over }),
            Algorithm::Concurrency => Tally::Slots {
                held: if admit { 0 } else { over },
                peak: None,
            },
            Algorithm::SlidingWindow => Tally::Sliding {
                current: if admit { 0 } else { over },
                previous: 0,
            },
            Algorithm::TokenBucket { refill, .. } => Tally::Bucket {
                taken: admit,
                debt_us: if admit { 0 } else { refill.tolerance_us },
                asked: None,
            },
        }
    }
}

impl Tally {
    /// A token bucket's tally with the tokens its key asked for in the
    /// window (any other tally as it is).
    pub fn with_asked(self, asked: Option<u64>) -> Tally {
        match self {
            Tally::Bucket { taken, debt_us, .. } => Tally::Bucket {
                taken,
                debt_us,
                asked,
            },
            other => other,
        }
    }

    /// What a counter that is not there reads: empty (a refund of it makes
    /// nothing).
    pub fn empty(algorithm: Algorithm) -> Tally {
        match algorithm {
            Algorithm::FixedWindow => Tally::Count(0),
            Algorithm::Concurrency => Tally::Slots {
                held: 0,
                peak: None,
            },
            Algorithm::SlidingWindow => Tally::Sliding {
                current: 0,
                previous: 0,
            },
            Algorithm::TokenBucket { .. } => Tally::Bucket {
                taken: true,
                debt_us: 0,
                asked: None,
            },
        }
    }
}

/// The sliding-window estimate: `previous` weighted by the share of it still
/// inside the window that ends now (`elapsed_ms` into the current window of
/// `window_ms`), plus `current`. Rounded down.
pub fn sliding_estimate(current: u64, previous: u64, elapsed_ms: u64, window_ms: u64) -> u64 {
    let window_ms = window_ms.max(1);
    let left = window_ms.saturating_sub(elapsed_ms.min(window_ms));
    let weighted = u128::from(previous) * u128::from(left) / u128::from(window_ms);
    current.saturating_add(u64::try_from(weighted).unwrap_or(u64::MAX))
}

/// Whole seconds (at least 1) until a sliding window admits `hits` more:
/// while this window's own count leaves room, until enough of the previous
/// window has slid out; otherwise after this window ends, until enough of it
/// (then the previous one) has slid out.
pub fn sliding_wait_seconds(
    current: u64,
    previous: u64,
    elapsed_ms: u64,
    window_ms: u64,
    limit: u64,
    hits: u64,
) -> u64 {
    let window_ms = window_ms.max(1);
    let elapsed_ms = elapsed_ms.min(window_ms);
    let wait_ms = if current.saturating_add(hits) <= limit && previous > 0 {
        // previous * (window - elapsed - t) / window <= limit - current - hits
        let room = u128::from(limit - current - hits) * u128::from(window_ms);
        let weight_now = u128::from(previous) * u128::from(window_ms - elapsed_ms);
        let t = weight_now
            .saturating_sub(room)
            .div_ceil(u128::from(previous));
        u64::try_from(t).unwrap_or(u64::MAX)
    } else {
        // Next window: `current` becomes the previous one, with nothing new.
        let rest = window_ms - elapsed_ms;
        let room = u128::from(limit.saturating_sub(hits)) * u128::from(window_ms);
        let weight = u128::from(current) * u128::from(window_ms);
        let t = if current == 0 {
            0
        } else {
            weight.saturating_sub(room).div_ceil(u128::from(current))
        };
        rest.saturating_add(u64::try_from(t).unwrap_or(u64::MAX))
    };
    wait_ms.div_ceil(1000).max(1)
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
