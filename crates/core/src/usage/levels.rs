//! The usage levels sluice counts keys at: every count from 1 to
//! [`EXACT`], then a geometric ladder up to 2^32 whose steps are at most 5%
//! apart. A key whose counter crosses a level is counted at it once, by the
//! instance whose request crossed it (the store's increment is atomic, so
//! exactly one request crosses each level of each key per window); "how
//! many keys reached at least c" is then exact at every level and within 5%
//! in c between them, and the fleet's figures are the sum of the instances'.

use std::sync::LazyLock;

/// Counts below this are levels of their own.
pub const EXACT: u64 = 32;
/// The ladder's step above [`EXACT`]: at most 5% apart.
const STEP: f64 = 1.05;
/// The highest level.
const TOP: u64 = 1 << 32;

/// The levels, ascending: 1, 2, ..., 32, 34, 36, ... up to 2^32.
pub static LEVELS: LazyLock<Box<[u64]>> = LazyLock::new(|| {
    let mut out: Vec<u64> = (1..=EXACT).collect();
    let mut at = EXACT;
    while at < TOP {
        // A float step is fine here: the ladder is built once, and only its
        // spacing (never over 5%) matters.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "levels are below 2^33, exact in an f64"
        )]
        let next = ((at as f64) * STEP).floor() as u64;
        at = next.max(at + 1);
        out.push(at);
    }
    out.into_boxed_slice()
});

/// How many levels `count` has reached (0 for 0): the levels crossed by
/// going from `a` to `b` are `index(a)..index(b)`.
pub fn index(count: u64) -> usize {
    if count <= EXACT {
        // At most 32: the cast cannot truncate.
        return usize::try_from(count).unwrap_or(0);
    }
    LEVELS.partition_point(|&l| l <= count)
}

/// `(index(a), index(b))` with one search where no level lies between
/// `a` and `b`, as for most requests (a count moving by a hit or a few).
pub fn indices(a: u64, b: u64) -> (usize, usize) {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let top = index(high);
    let bottom = if top == 0 || level(top - 1) <= low {
        top
    } else {
        index(low)
    };
    if a <= b { (bottom, top) } else { (top, bottom) }
}

/// The level at `i` (the `i`-th crossed is `LEVELS[i]`), or past the top.
pub fn level(i: usize) -> u64 {
    LEVELS.get(i).copied().unwrap_or(u64::MAX)
}

pub fn len() -> usize {
    LEVELS.len()
}

#[cfg(test)]
#[path = "levels_tests.rs"]
mod tests;
