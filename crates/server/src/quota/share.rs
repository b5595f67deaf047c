//! Splitting one rule's budget among the Envoys that report its bucket, and
//! turning a share into the token bucket Envoy enforces. Pure arithmetic.
//!
//! The split is max-min fair by demand: every Envoy first gets what it asks
//! for (the demand it claims, a deviation over its recent rate, and never
//! less than a floor), up to an equal part of what is
//! left; the budget the modest ones
//! leave goes to the busy ones; anything still left is spread in proportion
//! to demand. The shares always add up to the rule's rate, so the fleet as a
//! whole stays within it. A purely proportional split would starve a quiet
//! Envoy whenever another one floods (1% of the demand, 1% of the budget,
//! even when that Envoy asks for far less than an even part).

use crate::limiter::Algorithm;
use crate::store::demand::MemberDemand;

/// The part of the budget set aside as a floor, split evenly: no Envoy's
/// share falls below `FLOOR / k` of the rule, however quiet it has been.
const FLOOR: f64 = 0.1;
/// Seconds of its share an Envoy's bucket holds (windows): enough for the
/// requests of a quiet Envoy that arrive close together.
const BURST_SECONDS: f64 = 5.0;
/// Tokens an Envoy's bucket holds at least (windows): a quiet Poisson Envoy
/// at half its share is refused well under 1% of the time with six.
const MIN_BURST: u32 = 6;
/// What a bucket holds at most (windows): a tenth of the Envoy's part of the
/// window's count, or of an even part of it, whichever is more. A replaced
/// bucket starts full, so this bounds what the fleet can admit beyond the
/// rule at each round of replacements: a fifth of the count at most.
const BURST_SHARE: f64 = 0.1;

/// An Envoy that asks for this many times its share or more is pressed
/// against it: it spends every token as it comes, so a burst serves it
/// nothing, and each replacement that refills its bucket only lets it past
/// the budget.
const PRESSED: f64 = 1.5;
/// Seconds of its share a pressed Envoy's bucket holds (windows), at least
/// [`PRESSED_MIN_BURST`] tokens.
const PRESSED_BURST_SECONDS: f64 = 1.0;
const PRESSED_MIN_BURST: u32 = 2;

/// A pushed assignment replaces Envoy's token bucket (which then starts
/// full), so one is only pushed when the share moved by more than this.
pub const CHANGE: f64 = 0.1;

/// Splits `rate` (requests per second) among `members`; returns one share
/// per member, in order. A member of unknown demand is taken to want the
/// mean of the known ones (an even part when none is known).
pub fn split(rate: f64, members: &[MemberDemand]) -> Vec<f64> {
    let k = members.len();
    if k == 0 {
        return Vec::new();
    }
    let known: Vec<f64> = members
        .iter()
        .map(|m| m.demand)
        .filter(|d| *d >= 0.0)
        .collect();
    let unknown = if known.is_empty() {
        rate / k as f64
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    let floor = rate * FLOOR / k as f64;
    let claims: Vec<f64> = members
        .iter()
        .map(|m| {
            let d = if m.demand >= 0.0 { m.demand } else { unknown };
            d.max(floor)
        })
        .collect();
    let mut order: Vec<(f64, usize)> = claims.iter().copied().zip(0..).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut shares = vec![0.0; k];
    let mut left = rate;
    for (pos, (claim, i)) in order.into_iter().enumerate() {
        let give = claim.min(left / (k - pos) as f64);
        if let Some(s) = shares.get_mut(i) {
            *s = give;
        }
        left -= give;
    }
    if left > 0.0 {
        let total: f64 = claims.iter().sum();
        for (s, c) in shares.iter_mut().zip(&claims) {
            *s += left * c / total;
        }
    }
    shares
}

/// A token bucket as Envoy 1.40 enforces it: `tokens_per_fill` every
/// `fill_interval_seconds` (whole seconds; Envoy ignores fractions), refilled
/// continuously, holding at most `max_tokens`, starting full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
    pub fill_interval_seconds: u32,
}

/// What one Envoy is told to do with one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    AllowAll,
    DenyAll,
    Bucket(TokenBucket),
}

/// The bucket for a share of `share` requests per second of a rule allowing
/// `limit` per `period_seconds`. The fill interval is the rule's period, so
/// `tokens_per_fill` is the Envoy's part of the rule's count (whole requests,
/// at least one). The burst is [`BURST_SECONDS`] of the share for windows
/// (at least [`MIN_BURST`], at most [`BURST_SHARE`] of the Envoy's part of
/// the count or of an even part among `fleet` Envoys; only
/// [`PRESSED_BURST_SECONDS`] when the Envoy's `demand` is [`PRESSED`] times
/// its share or more), and the share's part of `burst` for a token-bucket
/// rule. A negative `demand` is unknown.
pub fn bucket(
    share: f64,
    demand: f64,
    limit: u32,
    period_seconds: u64,
    algorithm: Algorithm,
    fleet: usize,
) -> TokenBucket {
    let period = u32::try_from(period_seconds.max(1)).unwrap_or(u32::MAX);
    let rate = f64::from(limit) / f64::from(period);
    let fraction = if rate > 0.0 {
        (share / rate).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let tokens = whole(f64::from(limit) * fraction);
    let cap = whole(f64::from(tokens).max(f64::from(limit) / fleet.max(1) as f64) * BURST_SHARE);
    let (seconds, least) = if pressed(demand, share) {
        (PRESSED_BURST_SECONDS, PRESSED_MIN_BURST)
    } else {
        (BURST_SECONDS, MIN_BURST)
    };
    let max = match algorithm {
        Algorithm::TokenBucket { burst, .. } => whole(f64::from(burst) * fraction),
        _ => whole((share * seconds).ceil()).max(least).min(cap),
    };
    TokenBucket {
        max_tokens: max,
        tokens_per_fill: tokens,
        fill_interval_seconds: period,
    }
}

/// At least one, at most `u32::MAX`.
fn whole(x: f64) -> u32 {
    if x.is_finite() && x >= 1.0 {
        // Truncation is the point: shares round down so the fleet stays
        // within the rule.
        x.min(f64::from(u32::MAX)) as u32
    } else {
        1
    }
}

/// Whether an Envoy claiming `demand` is pressed against `share`: it asks for
/// [`PRESSED`] times it or more, so it spends every token as it comes.
fn pressed(demand: f64, share: f64) -> bool {
    demand > 0.0 && demand >= share * PRESSED
}

/// Whether `new` differs enough from what Envoy holds to be worth replacing
/// (which refills Envoy's bucket). So the buckets live at one time may add
/// up to [`CHANGE`] over the rule's rate (6% at most on the simulated
/// fleet). Pushing every cut at once keeps them within it, but each push
/// refills a bucket: on the simulated fleet the worst windows rose from
/// 1.05x to 1.08x of the count, so the hysteresis stays.
pub fn worth_pushing(held: Option<&Assignment>, new: &Assignment) -> bool {
    match (held, new) {
        (Some(Assignment::Bucket(a)), Assignment::Bucket(b)) => {
            let moved = |x: u32, y: u32| {
                let (x, y) = (f64::from(x), f64::from(y));
                (x - y).abs() > (y * CHANGE).max(1.0)
            };
            a.fill_interval_seconds != b.fill_interval_seconds
                || moved(a.tokens_per_fill, b.tokens_per_fill)
                || moved(a.max_tokens, b.max_tokens)
        }
        (Some(a), b) => a != b,
        (None, _) => true,
    }
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
