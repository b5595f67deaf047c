//! The circuit breaker as a pure state machine: callers report outcomes and
//! read the delay before the next recovery probe; time is passed in, so the
//! whole policy is tested without a store or a real clock.
//!
//! - Closed: store faults are counted; `TRIP_AFTER` in a row open it. A
//!   success resets the count. Errors caused by one request's data are not
//!   reported here at all.
//! - Open: requests are decided by the failure policy; the prober tries the
//!   store after `next_delay`, doubling from `PROBE_FIRST` to `PROBE_MAX`.
//! - A store that trips again soon after it was taken back (it answers a
//!   probe but fails requests) flaps: each such trip starts its probes at
//!   twice the previous start, up to `FLAP_MAX`, so a store that keeps
//!   failing costs at most one probe and a handful of requests per period.

use std::time::Duration;

use tokio::time::Instant;

/// Consecutive store faults that mean "down" rather than "one slow reply".
pub(crate) const TRIP_AFTER: u32 = 5;
pub(crate) const PROBE_FIRST: Duration = Duration::from_millis(50);
pub(crate) const PROBE_MAX: Duration = Duration::from_secs(2);
/// The longest wait before probing a store that keeps flapping.
pub(crate) const FLAP_MAX: Duration = Duration::from_secs(30);
/// Closed for this long, the store is stable again and flap damping resets.
pub(crate) const STABLE: Duration = Duration::from_secs(60);

/// What the breaker decided about one reported outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing changed.
    Same,
    /// This fault opened the breaker.
    Tripped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed { failures: u32 },
    Open { next: Duration },
}

/// Circuit-breaker state; wrap it in a lock to share it.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    phase: Phase,
    /// When the breaker last closed, to tell a flap from a new outage.
    closed_at: Option<Instant>,
    /// The first probe delay of the current (or last) outage.
    start_delay: Duration,
    trips: u64,
}

impl Breaker {
    /// A breaker that starts open: nothing is asked until a probe succeeds.
    pub(crate) fn new() -> Breaker {
        Breaker {
            phase: Phase::Open {
                next: Duration::ZERO,
            },
            closed_at: None,
            start_delay: PROBE_FIRST,
            trips: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// Opens since start.
    pub(crate) fn trips(&self) -> u64 {
        self.trips
    }

    /// A call the store answered.
    pub(crate) fn success(&mut self) {
        if let Phase::Closed { failures } = &mut self.phase {
            *failures = 0;
        }
    }

    /// A call the store failed (timeout, error, malformed reply).
    pub(crate) fn fault(&mut self, now: Instant) -> Verdict {
        let Phase::Closed { failures } = &mut self.phase else {
            return Verdict::Same;
        };
        *failures += 1;
        if *failures < TRIP_AFTER {
            return Verdict::Same;
        }
        let flapping = self
            .closed_at
            .is_some_and(|at| now.saturating_duration_since(at) < STABLE);
        self.start_delay = if flapping {
            (self.start_delay * 2).clamp(PROBE_FIRST, FLAP_MAX)
        } else {
            PROBE_FIRST
        };
        self.phase = Phase::Open {
            next: self.start_delay,
        };
        self.trips += 1;
        Verdict::Tripped
    }

    /// How long the prober waits before its next try, and the wait after it.
    pub(crate) fn next_delay(&mut self) -> Duration {
        match &mut self.phase {
            Phase::Open { next } => {
                let now = *next;
                let cap = PROBE_MAX.max(self.start_delay);
                *next = (now * 2).clamp(PROBE_FIRST, cap);
                now
            }
            Phase::Closed { .. } => Duration::ZERO,
        }
    }

    /// A probe succeeded: the store is asked again.
    pub(crate) fn close(&mut self, now: Instant) {
        self.phase = Phase::Closed { failures: 0 };
        self.closed_at = Some(now);
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
