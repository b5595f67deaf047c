//! Decisions: window math, hits, per-descriptor statuses, shadow and quota
//! mode, and the `Retry-After` of a response. Pure and synchronous: the store
//! has already counted, and this module only reads the numbers.

mod window;

pub use window::{Now, Unit, Window, WindowStart};

use crate::metrics::StatDelta;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub requests_per_unit: u32,
    pub window: Window,
    pub hits: u64,
    /// The counter after adding `hits`.
    pub after: u64,
    pub shadow: bool,
    pub quota: bool,
}

/// The decision for one counted descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Over the limit after shadow mode was applied: what the response says.
    pub over: bool,
    pub remaining: u32,
    pub reset_seconds: u64,
    pub quota: bool,
    pub stats: StatDelta,
}

/// Decides one descriptor: over when the count after adding exceeds the limit.
pub fn status(c: &Counted, now: Now) -> Status {
    let limit = u64::from(c.requests_per_unit);
    let before = c.after.saturating_sub(c.hits);
    let near = (c.requests_per_unit as f32 * NEAR_LIMIT_RATIO).floor() as u64;
    let mut stats = StatDelta {
        total_hits: c.hits,
        ..StatDelta::default()
    };
    let over = c.after > limit;
    if over {
        if before >= limit {
            stats.over_limit = c.hits;
        } else {
            stats.over_limit = c.after - limit;
            stats.near_limit = limit - near.max(before);
        }
        if c.shadow {
            stats.shadow_mode = stats.over_limit;
        }
    } else {
        stats.within_limit = c.hits;
        if c.after > near {
            stats.near_limit = if before >= near {
                c.hits
            } else {
                c.after - near
            };
        }
    }
    Status {
        over: over && !c.shadow,
        remaining: if over {
            0
        } else {
            u32::try_from(limit - c.after).unwrap_or(u32::MAX)
        },
        reset_seconds: c.window.seconds_until_reset(now),
        quota: c.quota,
        stats,
    }
}

/// The answer for the whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub over: bool,
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
    let mut blocking: Option<u64> = None;
    let (mut quota_seen, mut quota_all_over, mut quota_first_reset) = (false, true, u64::MAX);
    for s in statuses {
        if s.quota {
            quota_seen = true;
            quota_all_over &= s.over;
            quota_first_reset = quota_first_reset.min(s.reset_seconds);
        } else if s.over {
            blocking = Some(blocking.unwrap_or(0).max(s.reset_seconds));
        }
    }
    if quota_seen && quota_all_over {
        blocking = Some(blocking.unwrap_or(0).max(quota_first_reset));
    }
    match blocking {
        Some(wait) if !global_shadow => Summary {
            over: true,
            retry_after: Some(wait.max(1)),
        },
        _ => Summary {
            over: false,
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests;
