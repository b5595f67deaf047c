//! The one Lua script every Redis call runs, and how increments become its
//! arguments and its answer becomes tallies.
//!
//! Each increment is eight arguments (`kind`, plus 4 for a refund, `hits`,
//! `ttl`, two that depend on the kind, a concurrency slot's id or empty, and
//! the seconds its usage is kept and the window it counts) and one key, or
//! two: a sliding window's previous window, or a concurrency counter's usage
//! key (a hash of one field, the current window's start, holding the most
//! slots held at once in it; in the counter's hash slot). Each answers three
//! integers, the third being the usage the advisor reads (0 for a window,
//! whose count is its usage; -1 when the script could not say):
//! - fixed window: the count after `INCRBY`, and 0;
//! - sliding window: this window's count after `INCRBY`, and the previous
//!   window's count;
//! - a fixed window's take of a chunk to lease (its kind carries 32): the
//!   second argument of the kind is when its caller gives it up (µs on
//!   Redis's clock) and the slot argument the request's own hits; run
//!   later than that, it counts the request's own hits only and answers
//!   -4 second;
//! - either, when its period (the first argument of the kind) is not 0 and
//!   Redis's clock (`TIME`) is in another of its windows than the one asked:
//!   nothing counted, -3 and the start of Redis's window, so the count is
//!   made in the window of the clock every instance shares;
//! - token bucket: 1 if the hits were taken (else 0), how far the bucket
//!   is from full in microseconds, and the tokens its key took in the
//!   window so far (-1 for a refused request), or asked for, taken or not,
//!   when its kind carries 8 (a rule in shadow mode). When it carries 16
//!   (`overdraft: true`) hits that do not fit are refused and taken all
//!   the same, the arrival time going past the tolerance (debt). The key holds `<arrival time>:<window
//!   start>:<tokens asked>`, so the usage costs no call of its own. The
//!   time is Redis's own (`TIME`), so the clocks of the sluice instances
//!   sharing a bucket do not matter.
//! - concurrency: the slots held after taking one (a sorted set of slot ids
//!   scored by when their lease ends, on Redis's clock), or one past the
//!   limit when none was free; 0; and for a take, the most the key held at
//!   once earlier in the window (-1 for a release or a look). Ended leases
//!   are dropped first.
//!
//! A refund (`is_negative_hits`) answers the same three integers after giving
//! the hits back: `DECRBY` floored at 0 on a counter that exists (a missing
//! one stays missing), or a bucket's arrival time moved back, never past now.
//!
//! Writes run under `pcall`: a counter that would overflow answers `-1`, a key
//! holding something else `-2`, and those are the request's own errors. Any
//! other error (out of memory, read-only replica, no permission) fails the
//! call and is the store's.

use super::{Increment, StoreError};
use crate::limiter::{Algorithm, Now, Period, Tally};

/// The script itself (what each kind does is above).
pub(super) const SCRIPT: &str = include_str!("script.lua");

/// The script's first answer for a counter past `i64::MAX`: over any limit.
const OVERFLOW: i64 = -1;
/// The script's first answer for a key that holds something else.
const NOT_A_COUNTER: i64 = -2;

/// One increment as the script takes it.
pub(super) struct Op {
    /// One key, or two for a sliding window (this window's, then the
    /// previous one's).
    pub keys: Vec<String>,
    /// The numeric arguments: five before the slot, then the usage key's
    /// seconds and the window it counts.
    pub args: [u64; 7],
    /// A concurrency slot's id, the sixth argument (empty otherwise).
    pub slot: Option<Box<str>>,
}

/// The script's answers per increment.
pub(super) const ANSWERS: usize = 3;

/// Added to the shape's tag for a refund.
const REFUND: u64 = 4;
/// Added to a token bucket's tag when its usage counts refused hits too.
const DEMAND: u64 = 8;
/// Added to a token bucket's tag when it takes hits that do not fit, into
/// debt (`overdraft: true`).
const OVERDRAFT: u64 = 16;
/// Added to a fixed window's tag for a take of a chunk to lease: the
/// second number of the kind is when its caller gives it up (µs, the
/// store's clock), the slot argument the request's own hits.
const TAKE: u64 = 32;

/// Seconds a key may outlive its window. Expiries are relative to sluice's own
/// clock, so a skew between sluice and Redis cannot end a window early.
pub const EXPIRY_SLACK_SECONDS: u64 = 5;

impl Op {
    /// The script's arguments for `inc` with its `keys`, at `now`.
    pub(super) fn new(inc: &Increment, keys: Vec<String>, now: Now) -> Op {
        let slack = EXPIRY_SLACK_SECONDS;
        let until_end = inc.window.seconds_until_reset(now);
        let (p1, p2, ttl) = match inc.algorithm {
            Algorithm::FixedWindow => (checked(inc), 0, until_end + slack),
            // This window's count is read through the whole next window.
            Algorithm::SlidingWindow => (
                checked(inc),
                0,
                until_end + inc.window.period.seconds() + slack,
            ),
            Algorithm::TokenBucket { refill: r, .. } => (r.interval_us, r.tolerance_us, slack),
            Algorithm::Concurrency => (
                u64::from(inc.limit),
                inc.window.period.seconds().saturating_mul(1_000_000),
                slack,
            ),
        };
        let demand = inc.usage_counts_refused && inc.algorithm.refill().is_some();
        // Only a fixed window's take carries the flag: a concurrency slot
        // also has a slot argument and a second number (its lease).
        let (p2, slot, take) = match (inc.take, inc.algorithm) {
            (Some(t), Algorithm::FixedWindow) => (
                t.until_us,
                Some(t.own.to_string().into_boxed_str()),
                if t.until_us > 0 { TAKE } else { 0 },
            ),
            _ => (p2, inc.slot.clone(), 0),
        };
        Op {
            keys,
            slot,
            args: [
                u64::from(inc.algorithm.tag())
                    + if inc.refund { REFUND } else { 0 }
                    + if demand { DEMAND } else { 0 }
                    + if inc.algorithm.refill().is_some_and(|r| r.overdraft) {
                        OVERDRAFT
                    } else {
                        0
                    }
                    + take,
                inc.hits,
                ttl,
                p1,
                p2,
                until_end + slack,
                inc.window.start.0,
            ],
        }
    }

    /// The shape's tag, whether the op counts or refunds.
    pub(super) fn kind(&self) -> u8 {
        u8::try_from(self.args[0] % REFUND).unwrap_or(0)
    }

    /// Adds this increment's keys and arguments to an invocation.
    pub(super) fn add_to(&self, inv: &mut redis::ScriptInvocation<'_>) {
        for key in &self.keys {
            inv.key(key);
        }
        add_args(inv, &self.args, self.slot.as_deref().unwrap_or_default());
    }
}

/// The period, in seconds, whose window the script checks against the
/// store's clock before counting a fixed or sliding window (0: not checked:
/// a calendar month, or a refund, which gives back to the window it
/// counted in).
fn checked(inc: &Increment) -> u64 {
    match inc.window.period {
        Period::CalendarMonth => 0,
        _ if inc.refund => 0,
        p => p.seconds(),
    }
}

/// Arguments in the script's order: five numbers, the slot, the usage
/// key's seconds and window.
pub(super) fn add_args(inv: &mut redis::ScriptInvocation<'_>, args: &[u64; 7], slot: &str) {
    let [kind, hits, ttl, p1, p2, usage_ttl, usage_window] = *args;
    for a in [kind, hits, ttl, p1, p2] {
        inv.arg(a);
    }
    inv.arg(slot);
    inv.arg(usage_ttl);
    inv.arg(usage_window);
}

/// The script's first answer for a window Redis's clock is not in.
const ELSEWHERE: i64 = -3;
/// A fixed window's second answer for a take run after its caller gave it
/// up: the first is the count after the request's own hits, no chunk.
const LATE: i64 = -4;

/// What the script said of one increment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Answer {
    Counted(Tally),
    /// Not counted: Redis's clock is in the window of this period that
    /// starts at this second, not in the one asked.
    Elsewhere(u64),
    /// A take run after its caller gave it up: the count after the
    /// request's own hits, no chunk counted.
    Late(u64),
}

/// Answers from the script's raw replies ([`ANSWERS`] per increment) for
/// increments of `kinds`; a reply of the wrong length is the store's fault.
pub(super) fn decode(
    kinds: impl ExactSizeIterator<Item = u8>,
    raw: &[i64],
) -> Result<Vec<Answer>, StoreError> {
    super::same_length(raw.len(), kinds.len() * ANSWERS)?;
    kinds
        .zip(raw.chunks_exact(ANSWERS))
        .map(|(kind, answer)| {
            let (a, b, c) = match answer {
                [a, b, c] => (*a, *b, *c),
                _ => (0, 0, -1),
            };
            if a == ELSEWHERE && kind < 2 {
                let start = u64::try_from(b)
                    .map_err(|_| StoreError::BadReply(format!("window start {b}")))?;
                return Ok(Answer::Elsewhere(start));
            }
            // The usage figure, when the script could say.
            let usage = u64::try_from(c).ok();
            let count = |n: i64| match n {
                OVERFLOW => Ok(u64::MAX),
                NOT_A_COUNTER => Err(StoreError::Rejected(
                    "a counter key holds a value that is not a count".into(),
                )),
                n => u64::try_from(n)
                    .map_err(|_| StoreError::BadReply(format!("negative count {n}"))),
            };
            if kind == 0 && b == LATE {
                return Ok(Answer::Late(count(a)?));
            }
            Ok(Answer::Counted(match kind {
                1 => Tally::Sliding {
                    current: count(a)?,
                    previous: count(b)?,
                },
                2 => Tally::Bucket {
                    taken: count(a)? == 1,
                    debt_us: count(b)?,
                    asked: usage,
                },
                3 => Tally::Slots {
                    held: count(a)?,
                    peak: usage,
                },
                _ => Tally::Count(count(a)?),
            }))
        })
        .collect()
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
