//! The clock every decision is made against: the shared store's, once the
//! store has been read, else this host's.
//!
//! Windows are picked by this clock, so instances whose own clocks disagree
//! would count one real window in two keys (an instance a few seconds ahead
//! opens the next window early, and a real window admits up to twice its
//! limit). The store's clock is the one they share: a store that can tell
//! its time ([`follow`]) anchors this clock to it, and from then on it runs
//! on this host's monotonic clock from that anchor, so a step of the host's
//! wall clock (an NTP correction, an operator's `date`) changes nothing
//! until the next reading, and a host that was never set right agrees with
//! the fleet all the same. The anchor is off by at most half the round trip
//! of the reading it came from ([`uncertainty_us`]); the store's own check
//! of each count's window (the Redis script) covers what that leaves.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The store's time in µs at `origin`, or [`UNANCHORED`] when no store
/// has been read (the host's wall clock is read instead), half the round
/// trip of the reading it came from (aged, see [`DRIFT_PER_US`]), and when
/// that was (µs since `origin`).
///
/// `origin` is a monotonic instant fixed on first use, which may be after
/// the reading it is first used for (a process's first reading is taken
/// before anything asked for the origin): a reading's middle is measured
/// from it with its sign, so a reading older than the origin is placed
/// before it, not at it.
struct Anchor {
    origin: OnceLock<Instant>,
    at_origin_us: AtomicI64,
    uncertainty_us: AtomicU64,
    read_at_us: AtomicI64,
}

/// How far this host's monotonic clock may drift from the store's clock: 1
/// µs in every 10,000 (100 ppm, past what any quartz clock NTP disciplines
/// strays), so a held reading's uncertainty grows by 0.5 ms in 5 s.
const DRIFT_PER_US: u64 = 10_000;

const UNANCHORED: i64 = i64::MIN;

static CLOCK: Anchor = Anchor::new();

impl Anchor {
    const fn new() -> Anchor {
        Anchor {
            origin: OnceLock::new(),
            at_origin_us: AtomicI64::new(UNANCHORED),
            uncertainty_us: AtomicU64::new(0),
            read_at_us: AtomicI64::new(0),
        }
    }

    fn origin(&self) -> Instant {
        *self.origin.get_or_init(Instant::now)
    }

    /// µs from the origin to `at`, negative when `at` came before it.
    fn since_origin_us(&self, at: Instant) -> i64 {
        let origin = self.origin();
        let (d, sign) = match at.checked_duration_since(origin) {
            Some(d) => (d, 1),
            None => (origin.duration_since(at), -1),
        };
        sign * i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
    }

    fn now_us(&self) -> u64 {
        let anchor = self.at_origin_us.load(Relaxed);
        if anchor == UNANCHORED {
            return host_us();
        }
        let since = i64::try_from(self.origin().elapsed().as_micros()).unwrap_or(i64::MAX);
        u64::try_from(anchor.saturating_add(since)).unwrap_or(0)
    }

    /// Takes a reading, unless the one held is better: a reading over a
    /// slow round trip (the store or this host busy) that agrees with the
    /// anchor held, within both uncertainties, would only widen the error;
    /// one that disagrees means the store's clock moved, and is taken.
    fn follow(&self, store_us: u64, sent: Instant, answered: Instant) {
        let rtt = answered.saturating_duration_since(sent);
        let middle = sent + rtt / 2;
        let since = self.since_origin_us(middle);
        let anchor = i64::try_from(store_us)
            .unwrap_or(i64::MAX)
            .saturating_sub(since);
        let fresh = u64::try_from(rtt.as_micros() / 2).unwrap_or(u64::MAX);
        let held = self.at_origin_us.load(Relaxed);
        if held != UNANCHORED {
            let age = since
                .saturating_sub(self.read_at_us.load(Relaxed))
                .unsigned_abs();
            let kept = self
                .uncertainty_us
                .load(Relaxed)
                .saturating_add(age / DRIFT_PER_US);
            let agrees = anchor.abs_diff(held) <= fresh.saturating_add(kept);
            if agrees && fresh >= kept {
                self.uncertainty_us.store(kept, Relaxed);
                self.read_at_us.store(since, Relaxed);
                return;
            }
        }
        self.uncertainty_us.store(fresh, Relaxed);
        self.read_at_us.store(since, Relaxed);
        self.at_origin_us.store(anchor, Relaxed);
    }

    fn offset_ms(&self) -> i64 {
        if self.at_origin_us.load(Relaxed) == UNANCHORED {
            return 0;
        }
        let ours = i64::try_from(self.now_us()).unwrap_or(i64::MAX);
        let host = i64::try_from(host_us()).unwrap_or(i64::MAX);
        ours.saturating_sub(host) / 1000
    }
}

/// Microseconds since the epoch on the clock decisions follow.
pub(super) fn now_us() -> u64 {
    CLOCK.now_us()
}

/// This host's wall clock, in µs since the epoch.
pub fn host_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A reading of the store's clock: `store_us` (µs since the epoch) was
/// read between `sent` and `answered` on this host's monotonic clock. The
/// anchor becomes the reading at the round trip's middle.
pub fn follow(store_us: u64, sent: Instant, answered: Instant) {
    CLOCK.follow(store_us, sent, answered);
}

/// How far the clock may be from the store's, in µs: half the round trip
/// of the last reading (0 before any).
pub fn uncertainty_us() -> u64 {
    CLOCK.uncertainty_us.load(Relaxed)
}

/// How long before a window ends this instance may no longer act alone on
/// what it remembers of the window (spend a lease, refuse from the
/// over-limit cache), in µs: how far its clock may be from the store's,
/// and a millisecond for the monotonic clock's drift since the reading.
pub fn guard_us() -> u64 {
    uncertainty_us().saturating_add(1_000)
}

/// How far the clock decisions follow is ahead of this host's wall clock,
/// in ms (negative: behind); 0 before the store was read.
pub fn offset_ms() -> i64 {
    CLOCK.offset_ms()
}

#[cfg(test)]
#[path = "clock_tests.rs"]
mod tests;
