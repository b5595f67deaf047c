//! Decisions: window math, hits, per-descriptor statuses, shadow and quota
//! mode, and the `Retry-After` of a response. Pure and synchronous: the store
//! has already counted, and this module only reads the numbers.

mod calendar;
pub mod clock;
mod refill;
mod shape;
mod window;

pub use refill::Refill;
pub use shape::{Algorithm, Decision, Tally, sliding_estimate, sliding_wait_seconds};
pub use window::{MAX_WINDOW_SECONDS, Now, Period, Unit, Window, WindowStart};

/// What one decision adds to a rule's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatDelta {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
    /// Hits given back (`is_negative_hits`): never counted as hits.
    pub refunded: u64,
}

/// The share of a limit above which hits count as `near_limit` (the reference's
/// default `NEAR_LIMIT_RATIO`).
pub const NEAR_LIMIT_RATIO: f32 = 0.8;

/// How many hits a descriptor adds: the per-descriptor `hits_addend` when it is
/// present (0 there means check without counting), else the request's, where 0
/// means 1 for compatibility with Envoys that never set it.
pub fn hits(request_addend: u32, descriptor_addend: Option<u64>) -> u64 {
    descriptor_addend.unwrap_or(u64::from(request_addend.max(1)))
}

/// One counted descriptor after the store answered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    pub requests_per_unit: u32,
    pub window: Window,
    pub algorithm: Algorithm,
    pub hits: u64,
    /// What the store reported.
    pub tally: Tally,
    /// Milliseconds into `window` when the decision is made.
    pub elapsed_ms: u64,
    pub shadow: bool,
    pub quota: bool,
    /// The share of the limit above which hits count as `near_limit`
    /// (`--near-limit-ratio`, [`NEAR_LIMIT_RATIO`] by default).
    pub near_ratio: f32,
}

/// The decision for one counted descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Over the limit after shadow mode was applied: what the response says.
    pub over: bool,
    pub remaining: u32,
    /// `duration_until_reset`: the window's end, or a full bucket.
    pub reset_seconds: u64,
    /// How long a refused client should wait (`Retry-After`).
    pub retry_seconds: u64,
    pub quota: bool,
    pub stats: StatDelta,
}

impl Status {
    /// The status of a descriptor with no counted limit.
    pub fn none() -> Status {
        Status {
            over: false,
            remaining: u32::MAX,
            reset_seconds: 0,
            retry_seconds: 0,
            quota: false,
            stats: StatDelta::default(),
        }
    }

    /// Whether this limit is closer to exhaustion than `other`, for the one
    /// status a descriptor with several limits reports: an over-limit one
    /// first (the one with the longest wait), else the fewest left.
    pub fn tighter_than(&self, other: &Status) -> bool {
        match (self.over, other.over) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => self.retry_seconds > other.retry_seconds,
            (false, false) => self.remaining < other.remaining,
        }
    }
}

/// Decides one descriptor from what the store reported.
pub fn status(c: &Counted, now: Now) -> Status {
    match c.tally {
        // Slots free up whenever a request ends: worth asking again soon.
        Tally::Slots { held, .. } => counted_status(c, held, 1, Some(1)),
        Tally::Count(after)
        | Tally::Moved(after)
        | Tally::Leased(after)
        | Tally::Remembered(after) => {
            counted_status(c, after, c.window.seconds_until_reset(now), None)
        }
        Tally::Sliding { current, previous } => {
            let window_ms = c.window.period.seconds().saturating_mul(1000);
            let after = sliding_estimate(current, previous, c.elapsed_ms, window_ms);
            let wait = sliding_wait_seconds(
                current,
                previous,
                c.elapsed_ms,
                window_ms,
                u64::from(c.requests_per_unit),
                c.hits.max(1),
            );
            counted_status(c, after, c.window.seconds_until_reset(now), Some(wait))
        }
        Tally::Bucket { taken, debt_us, .. } => bucket_status(c, taken, debt_us),
        // Decided where the store failed; its status reads like a count.
        Tally::Decided(v) => {
            let tally = v.as_counted(c.algorithm, c.requests_per_unit, c.hits);
            status(&Counted { tally, ..*c }, now)
        }
    }
}

/// The status of a refund: `c.hits` given back, `c.tally` what the counter
/// reads after. Never over the limit, and never hits in the metrics; what
/// is left is shown as a check would show it.
pub fn refunded(c: &Counted, now: Now) -> Status {
    let check = status(&Counted { hits: 0, ..*c }, now);
    Status {
        over: false,
        stats: StatDelta {
            refunded: c.hits,
            ..StatDelta::default()
        },
        ..check
    }
}

/// A count held against the limit: over when the count after adding
/// exceeds it (fixed windows, and sliding windows' estimates).
fn counted_status(c: &Counted, after: u64, reset: u64, wait: Option<u64>) -> Status {
    let limit = u64::from(c.requests_per_unit);
    let before = after.saturating_sub(c.hits);
    let near = (c.requests_per_unit as f32 * c.near_ratio).floor() as u64;
    let mut stats = StatDelta {
        total_hits: c.hits,
        ..StatDelta::default()
    };
    let over = after > limit;
    if over {
        if before >= limit {
            stats.over_limit = c.hits;
        } else {
            stats.over_limit = after - limit;
            stats.near_limit = limit - near.max(before);
        }
        if c.shadow {
            stats.shadow_mode = stats.over_limit;
        }
    } else {
        stats.within_limit = c.hits;
        if after > near {
            stats.near_limit = if before >= near { c.hits } else { after - near };
        }
    }
    Status {
        over: over && !c.shadow,
        remaining: if over {
            0
        } else {
            u32::try_from(limit - after).unwrap_or(u32::MAX)
        },
        reset_seconds: reset,
        retry_seconds: wait.unwrap_or(reset),
        quota: c.quota,
        stats,
    }
}

/// A token bucket: over when the store could not take the hits.
fn bucket_status(c: &Counted, taken: bool, debt_us: u64) -> Status {
    let Algorithm::TokenBucket { burst, refill } = c.algorithm else {
        // A bucket answer for a rule that is not a bucket: count it as full.
        return counted_status(c, u64::MAX, 1, None);
    };
    let tokens = refill.tokens(debt_us);
    let near = (burst as f32 * (1.0 - c.near_ratio)).floor() as u64;
    let mut stats = StatDelta {
        total_hits: c.hits,
        ..StatDelta::default()
    };
    if taken {
        stats.within_limit = c.hits;
        if tokens < near {
            stats.near_limit = c.hits;
        }
    } else {
        stats.over_limit = c.hits;
        if c.shadow {
            stats.shadow_mode = c.hits;
        }
    }
    Status {
        over: !taken && !c.shadow,
        remaining: u32::try_from(tokens).unwrap_or(u32::MAX),
        reset_seconds: debt_us.div_ceil(1_000_000),
        retry_seconds: refill.wait_seconds(debt_us, c.hits.max(1)),
        quota: c.quota,
        stats,
    }
}

/// Whether adding `hits` to a counter that reads `seen` (a tally taken with
/// no hits) would take it over `limit`.
pub fn would_exceed(
    limit: u32,
    hits: u64,
    algorithm: &Algorithm,
    window: &Window,
    seen: &Tally,
    now_ms: u64,
) -> bool {
    let limit64 = u64::from(limit);
    match (*seen, *algorithm) {
        (
            Tally::Count(c) | Tally::Moved(c) | Tally::Leased(c) | Tally::Slots { held: c, .. },
            _,
        ) => c.saturating_add(hits) > limit64,
        (Tally::Sliding { current, previous }, _) => {
            let window_ms = window.period.seconds().saturating_mul(1000);
            let elapsed = now_ms.saturating_sub(window.start.0.saturating_mul(1000));
            sliding_estimate(current.saturating_add(hits), previous, elapsed, window_ms) > limit64
        }
        (Tally::Bucket { debt_us, .. }, Algorithm::TokenBucket { refill, .. }) => {
            refill.tokens(debt_us) < hits
        }
        (Tally::Bucket { .. }, _) => true,
        (Tally::Decided(v), _) => v == Decision::Refuse,
        // Remembered only when over the limit.
        (Tally::Remembered(_), _) => true,
    }
}

/// The answer for the whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub over: bool,
    /// Global shadow mode turned an over-limit answer into OK.
    pub shadowed: bool,
    /// Whole seconds a client should wait, only when `over`.
    pub retry_after: Option<u64>,
}

/// Combines statuses as the reference does: over when any non-quota descriptor
/// is over, or when there are quota descriptors and all of them are over.
/// Global shadow mode turns an over answer into an allowed one.
///
/// `Retry-After` is the wait until the request could pass: the latest reset of
/// the over non-quota descriptors, and, when all quota descriptors are over,
/// the earliest of theirs (one quota regained is enough). Never below 1.
pub fn summarize<'a>(
    statuses: impl IntoIterator<Item = &'a Status>,
    global_shadow: bool,
) -> Summary {
    let mut s = Summarizing::default();
    for status in statuses {
        s.add(status);
    }
    s.summary(global_shadow)
}

/// [`summarize`] one status at a time, as a request's are decided: no
/// list of them is kept.
#[derive(Debug, Clone, Copy)]
pub struct Summarizing {
    blocking: Option<u64>,
    quota_seen: bool,
    quota_all_over: bool,
    quota_first_reset: u64,
}

impl Default for Summarizing {
    fn default() -> Self {
        Summarizing {
            blocking: None,
            quota_seen: false,
            quota_all_over: true,
            quota_first_reset: u64::MAX,
        }
    }
}

impl Summarizing {
    pub fn add(&mut self, s: &Status) {
        if s.quota {
            self.quota_seen = true;
            self.quota_all_over &= s.over;
            self.quota_first_reset = self.quota_first_reset.min(s.retry_seconds);
        } else if s.over {
            self.blocking = Some(self.blocking.unwrap_or(0).max(s.retry_seconds));
        }
    }

    pub fn summary(self, global_shadow: bool) -> Summary {
        let mut blocking = self.blocking;
        if self.quota_seen && self.quota_all_over {
            blocking = Some(blocking.unwrap_or(0).max(self.quota_first_reset));
        }
        match blocking {
            Some(wait) if !global_shadow => Summary {
                over: true,
                shadowed: false,
                retry_after: Some(wait.max(1)),
            },
            blocked => Summary {
                over: false,
                shadowed: blocked.is_some(),
                retry_after: None,
            },
        }
    }
}

#[cfg(test)]
mod tests;
