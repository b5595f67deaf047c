//! Limits chosen with evidence: for every limit of every rule, how its keys
//! really use it in each recent window (the distribution of per-key usage,
//! [`history`]) and what any candidate limit would refuse ([`query`]),
//! read at `/api/usage`, in `/metrics` and by `sluice advise`.
//!
//! The request path adds one or two relaxed atomics per counted limit:
//! each answer's count says which usage levels its key crossed
//! ([`levels`]). Only the store's counts are used, so the fleet's figures
//! are exact: a request answered from the local over-limit cache (an
//! enforced rule's key past its limit) adds nothing, and demand past an
//! enforced limit shows only until the cache answers. A rule in shadow mode
//! is answered from the cache too, but the hits answered there are counted
//! by the store within a quarter second (the store's `CountedLate`), whose
//! answer crosses their levels: its whole demand is counted.
//!
//! Here, in the core: the levels, the history and the queries, which the
//! request path and the rules' counters need. The reports read from them
//! (`/api/usage`, `sluice advise`) are the `sluice` crate's.

pub mod history;
pub mod levels;
pub mod query;

pub use history::{Usage, UsageBudget};

use crate::limiter::Tally;

/// One decision's usage: the key's usage before and after, and the hits
/// behind it, as the store answered `tally` for `hits` (a refund lowers
/// it). A window's usage is its count; a token bucket's, the tokens its key
/// asked for in the window; a concurrency counter's, the most slots its key
/// held at once in the window. Each comes from the store, so each level of
/// each key is crossed once per window across the fleet.
pub fn crossing(tally: Tally, hits: u64, refund: bool) -> Option<(u64, u64, u64)> {
    let after = match tally {
        Tally::Count(c) | Tally::Moved(c) | Tally::Sliding { current: c, .. } => c,
        Tally::Bucket {
            asked: Some(asked), ..
        } => asked,
        // A take: the peak rises to the slots now held, if past it. A
        // release or a look reports no peak, and crosses nothing.
        Tally::Slots {
            held,
            peak: Some(peak),
        } => return Some((peak, peak.max(held), hits)),
        _ => return None,
    };
    Some(if refund {
        (after.saturating_add(hits), after, 0)
    } else {
        (after.saturating_sub(hits), after, hits)
    })
}

/// How long after a period ends its figures may still move: leased
/// positions never spent are given back once their window has ended (the
/// store's sweep, each second, then a round trip).
pub const SETTLE_SECONDS: u64 = 5;

/// The Prometheus buckets of the per-key peak (bounded: these 16 and +Inf).
const EXPORTED: [u64; 16] = [
    1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000,
];

/// A histogram for the exposition: (upper bound, count in the bucket) not
/// cumulative, the count and the sum.
pub type Exported = (Vec<(f64, u64)>, u64, u64);

/// A limit's completed periods as a running histogram of per-key peaks:
/// each (key, period) is one observation of its peak, so the counts only
/// grow (periods are folded in as a scrape finds them complete, while the
/// last hour is kept, and [`SETTLE_SECONDS`] after each ends, so leased
/// positions given back when their window ended are in). Keys per bucket
/// (not cumulative), keys, hits.
pub fn histogram(usage: &Usage, now: u64) -> Option<Exported> {
    let window = usage.window();
    let current = now.saturating_sub(SETTLE_SECONDS) / history::period_of(window);
    let mut totals = usage.totals()?.lock();
    if totals.buckets.is_empty() {
        totals.buckets = vec![0; EXPORTED.len() + 1];
    }
    for p in usage.periods(window, now, history::SLOTS as u64) {
        let index = p.start / p.seconds;
        if index >= current || index < totals.folded {
            continue;
        }
        // A share below 0 (refunds of another instance's hits) is taken
        // as none: the exported histogram never goes down.
        let share = |n: i64| u64::try_from(n).unwrap_or(0);
        let keys = share(p.keys.first().copied().unwrap_or(0));
        let mut below = 0;
        for (i, le) in EXPORTED.iter().enumerate() {
            let at_most = keys.saturating_sub(share(query::at_least(&p.keys, le + 1)));
            if let Some(b) = totals.buckets.get_mut(i) {
                *b += at_most.saturating_sub(below);
            }
            below = at_most;
        }
        if let Some(inf) = totals.buckets.last_mut() {
            *inf += keys.saturating_sub(below);
        }
        totals.keys += keys;
        totals.hits += p.hits;
        totals.folded = index + 1;
    }
    if totals.folded == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss, reason = "bucket bounds are small")]
    let bounds = EXPORTED.iter().map(|le| *le as f64).chain([f64::INFINITY]);
    Some((
        bounds.zip(totals.buckets.iter().copied()).collect(),
        totals.keys,
        totals.hits,
    ))
}

#[cfg(test)]
mod tests;
