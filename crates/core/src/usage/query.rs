//! What the usage history answers: how many keys reached at least c, what
//! a limit L would refuse (keys and requests), and the quantiles of the
//! per-key peak, per period or pooled over them. Exact at every level; in
//! between, a count c reads as the level at or just below it (within 5%);
//! requests refused read each key at the middle of its level's span.
//!
//! Keys per level are one instance's share of the fleet's, signed (a
//! refund through this instance of hits another counted takes a key back
//! here): counts of keys and requests are shares too, and sum to the
//! fleet's; quantiles and the maximum read the share clamped at 0.

use super::history::Period;
use super::levels;

/// Keys that reached at least `c` (c of 0: every key).
pub fn at_least(keys: &[i64], c: u64) -> i64 {
    let i = levels::index(c.max(1));
    keys.get(i.saturating_sub(1)).copied().unwrap_or(0)
}

/// Keys a limit of `limit` refused at least once.
pub fn keys_refused(keys: &[i64], limit: u64) -> i64 {
    at_least(keys, limit.saturating_add(1))
}

/// Requests a limit of `limit` refused: every hit past it, summed over keys.
/// A key is known only to lie in its level's span (from a level to just
/// below the next): each is read at what it is expected to refuse there
/// (the span's middle less the limit; within the span holding the limit,
/// the mean over the span of what lies past it), so the estimate is
/// unbiased and each key's error at most half a step (2.5% of its usage).
/// Exact below [`levels::EXACT`], where every count is a level.
pub fn requests_refused(keys: &[i64], limit: u64) -> i64 {
    let from = levels::index(limit.saturating_add(1)).saturating_sub(1);
    let mut total = 0.0f64;
    // One instance's levels need not fall monotonically (another instance
    // crossed some of them): every span is summed, signed.
    for i in from..keys.len() {
        let here = keys.get(i).copied().unwrap_or(0);
        let past = keys.get(i + 1).copied().unwrap_or(0);
        let in_span = here.saturating_sub(past);
        if in_span != 0 {
            total += in_span as f64 * expected_past(levels::level(i), levels::level(i + 1), limit);
        }
    }
    total.round() as i64
}

/// What a key whose usage lies anywhere in `lo..hi` (evenly) is expected
/// to have past `limit`.
#[allow(
    clippy::cast_precision_loss,
    reason = "counts below 2^33, exact in an f64"
)]
fn expected_past(lo: u64, hi: u64, limit: u64) -> f64 {
    let top = hi.saturating_sub(1).max(lo);
    if top <= limit {
        return 0.0;
    }
    let span = (top - lo + 1) as f64;
    if lo > limit {
        return (lo + top) as f64 / 2.0 - limit as f64;
    }
    // Counts limit+1 ..= top each refuse (count - limit): 1 + 2 + ... + n.
    let n = (top - limit) as f64;
    n * (n + 1.0) / 2.0 / span
}

/// The periods pooled: each (key, period) is one sample.
pub fn pooled(periods: &[Period]) -> Vec<i64> {
    let mut out = vec![0i64; levels::len()];
    for p in periods {
        for (o, k) in out.iter_mut().zip(&p.keys) {
            *o = o.saturating_add(*k);
        }
    }
    out
}

/// The `q` quantile of the per-key peak (the smallest level that at most
/// a `1 - q` share of keys went past), or 0 with no keys.
pub fn quantile(keys: &[i64], q: f64) -> u64 {
    let share = |n: i64| f64::from(u32::try_from(n.max(0)).unwrap_or(u32::MAX));
    let total = keys.first().copied().map_or(0.0, share);
    if total == 0.0 {
        return 0;
    }
    let allowed = (1.0 - q) * total;
    for (i, _) in keys.iter().enumerate() {
        let past = keys.get(i + 1).copied().map_or(0.0, share);
        if past <= allowed {
            return levels::level(i);
        }
    }
    levels::level(keys.len().saturating_sub(1))
}

/// The highest level any key reached.
pub fn max(keys: &[i64]) -> u64 {
    keys.iter().rposition(|&n| n > 0).map_or(0, levels::level)
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
