//! How late this process runs its ready tasks: a ticker that asks to wake
//! every [`TICK`] and records how much later it was woken. A store call
//! that seemed slow while the runtime itself ran late says nothing about
//! the store (its reply may have waited in our socket buffer for a worker),
//! so the breaker only counts it when the runtime was on time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TICK: Duration = Duration::from_millis(5);
const TICK_US: u64 = 5_000;
/// The worst lateness is kept over two windows of this length.
const WINDOW_MS: u64 = 250;

/// The runtime's recent lateness.
#[derive(Debug)]
pub(crate) struct Lag {
    base: Instant,
    /// Worst lateness (µs) in the current window and the one before.
    current: AtomicU64,
    previous: AtomicU64,
    /// The current window's start, in ms after `base`.
    window: AtomicU64,
    /// When the ticker last woke, in µs after `base`, plus one (0: it has
    /// not started): a ticker that has not woken for long is late now,
    /// before it can record it.
    woke: AtomicU64,
}

impl Lag {
    pub(crate) fn new() -> Lag {
        Lag {
            base: Instant::now(),
            current: AtomicU64::new(0),
            previous: AtomicU64::new(0),
            window: AtomicU64::new(0),
            woke: AtomicU64::new(0),
        }
    }

    fn since_base_us(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// How late the runtime is running, including a lateness still under
    /// way: the worst recent one, or how far past its tick the ticker is
    /// now (a thread kept off a core records nothing until it runs again,
    /// and everything it would have read meanwhile waits in its sockets).
    pub(crate) fn late_now(&self) -> Duration {
        let woke = self.woke.load(Relaxed);
        if woke == 0 {
            return self.recent();
        }
        let overdue = self
            .since_base_us()
            .saturating_sub(woke - 1)
            .saturating_sub(TICK_US);
        self.recent().max(Duration::from_micros(overdue))
    }

    /// The worst lateness seen lately (about the last quarter to half
    /// second).
    pub(crate) fn recent(&self) -> Duration {
        Duration::from_micros(self.current.load(Relaxed).max(self.previous.load(Relaxed)))
    }

    fn record(&self, late: Duration) {
        let now_ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        if now_ms >= self.window.load(Relaxed) + WINDOW_MS {
            self.window.store(now_ms, Relaxed);
            self.previous.store(self.current.swap(0, Relaxed), Relaxed);
        }
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.current.fetch_max(us, Relaxed);
    }

    /// Ticks until `token` is cancelled.
    pub(crate) async fn watch(&self, token: CancellationToken) {
        loop {
            let asked = Instant::now();
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                () = token.cancelled() => return,
            }
            self.woke.store(self.since_base_us() + 1, Relaxed);
            self.record(asked.elapsed().saturating_sub(TICK));
        }
    }
}

#[cfg(test)]
#[path = "lag_tests.rs"]
mod tests;
