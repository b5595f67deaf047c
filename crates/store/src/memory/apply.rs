//! How one increment changes its slot, shape by shape, under the shard's
//! lock: a window's count, a sliding window's two, a token bucket's arrival
//! time and the tokens its key asked for in the window.

use super::{BUCKET, Slot, secs};
use crate::Increment;
use crate::limiter::{Algorithm, Tally};

/// One increment on its slot, by the rule's algorithm.
pub(super) fn apply(slot: &mut Slot, inc: &Increment, now_us: u64) -> Tally {
    let (start, end) = (secs(inc.window.start.0), secs(inc.window.end()));
    if inc.algorithm.refill().is_none() {
        slot.limit = inc.limit;
    }
    match inc.algorithm {
        Algorithm::FixedWindow => {
            if slot.start != start {
                (slot.start, slot.end, slot.count) = (start, end, 0);
            }
            slot.count = slot.count.saturating_add(inc.hits);
            Tally::Count(slot.count)
        }
        Algorithm::SlidingWindow => {
            if slot.start != start {
                let previous = secs(inc.window.previous().start.0);
                slot.previous = if slot.start == previous {
                    u32::try_from(slot.count).unwrap_or(u32::MAX)
                } else {
                    0
                };
                slot.count = 0;
                slot.start = start;
                // Kept through the next window, which weighs this one.
                slot.end = secs(inc.window.end() + inc.window.period.seconds());
            }
            slot.count = slot.count.saturating_add(inc.hits);
            Tally::Sliding {
                current: slot.count,
                previous: u64::from(slot.previous),
            }
        }
        // Held in the leases, never in a slot.
        Algorithm::Concurrency => Tally::empty(inc.algorithm),
        Algorithm::TokenBucket { refill, .. } => {
            let tat = if slot.start == BUCKET { slot.count } else { 0 };
            let (tat, tally) = refill.take(tat, now_us, inc.hits);
            if slot.start != BUCKET || slot.limit != start {
                (slot.limit, slot.previous) = (start, 0);
            }
            // Refused hits count only where the usage is the whole demand.
            let counted = inc.counts_usage(&tally);
            let asked = u64::from(slot.previous).saturating_add(inc.hits);
            if counted {
                slot.previous = u32::try_from(asked).unwrap_or(u32::MAX);
            }
            slot.start = BUCKET;
            slot.count = tat;
            // Full again (and so the same as no slot) from then on, but kept
            // while its window's usage is counted.
            let full = secs(tat.div_ceil(1_000_000));
            slot.end = if slot.previous > 0 {
                full.max(end)
            } else {
                full
            };
            tally.with_asked(counted.then_some(asked))
        }
    }
}

/// A refund on its slot: the current window's count goes down, floored at
/// 0; a bucket gets its tokens back, up to full.
pub(super) fn give_back(slot: &mut Slot, inc: &Increment, now_us: u64) -> Tally {
    let start = secs(inc.window.start.0);
    match inc.algorithm {
        Algorithm::FixedWindow if slot.start == start => {
            slot.count = slot.count.saturating_sub(inc.hits);
            Tally::Count(slot.count)
        }
        Algorithm::SlidingWindow if slot.start == start => {
            slot.count = slot.count.saturating_sub(inc.hits);
            Tally::Sliding {
                current: slot.count,
                previous: u64::from(slot.previous),
            }
        }
        // The slot still holds the previous window: this one has no count.
        Algorithm::SlidingWindow if slot.start == secs(inc.window.previous().start.0) => {
            Tally::Sliding {
                current: 0,
                previous: slot.count,
            }
        }
        Algorithm::TokenBucket { refill, .. } if slot.start == BUCKET => {
            let (tat, tally) = refill.give_back(slot.count, now_us, inc.hits);
            slot.count = tat;
            slot.end = secs(tat.div_ceil(1_000_000)).max(slot.end);
            let asked = if slot.limit == start {
                let left = u64::from(slot.previous).saturating_sub(inc.hits);
                slot.previous = u32::try_from(left).unwrap_or(u32::MAX);
                left
            } else {
                0
            };
            tally.with_asked(Some(asked))
        }
        // An older window's slot, or another shape's: nothing to give back.
        _ => Tally::empty(inc.algorithm),
    }
}
