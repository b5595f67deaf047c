//! Store calls quota mode may make: one budget per stream and one for the
//! instance. A usage report may name a thousand buckets, and a stream's
//! timer touches every bucket it holds each interval; without a budget one
//! client could turn its reports into store load that crowds out every
//! `ShouldRateLimit` counter on the same Redis. A call the budgets cannot
//! afford is deferred: Envoy keeps (and renews) the share it holds, a new
//! bucket waits for the timer, and buckets written longest ago go first.

use parking_lot::Mutex;
use tokio::time::Instant;

/// Seconds of its rate a stream's budget saves up: one report interval
/// (Envoy reports every 5 s), so a report naming its buckets at once is
/// afforded whole at an even share of the instance's rate. With one second
/// saved, 1,000 streams of 10 buckets (2 calls a second each) deferred 8 of
/// every report's 10 writes.
pub(super) const STREAM_SAVES: f64 = 5.0;

/// A token bucket of calls: `rate` a second, at most `saves` seconds' worth
/// saved up.
#[derive(Debug)]
pub(super) struct CallBudget {
    rate: f64,
    saves: f64,
    tokens: f64,
    at: Instant,
}

impl CallBudget {
    /// A full budget of `rate` calls a second (0 allows none), saving one
    /// second's worth.
    pub(super) fn new(rate: u32, now: Instant) -> CallBudget {
        CallBudget::saving(rate, 1.0, now)
    }

    /// A full budget of `rate` calls a second saving `saves` seconds' worth.
    pub(super) fn saving(rate: u32, saves: f64, now: Instant) -> CallBudget {
        CallBudget {
            rate: f64::from(rate),
            saves,
            tokens: f64::from(rate) * saves,
            at: now,
        }
    }

    fn most(&self) -> f64 {
        self.rate * self.saves
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.most());
        self.at = now;
    }

    /// Takes up to `wanted` calls; returns how many were granted.
    pub(super) fn take(&mut self, wanted: usize, now: Instant) -> usize {
        self.refill(now);
        // Whole calls only; the float never exceeds `rate` times `saves`.
        let granted = (self.tokens.floor() as usize).min(wanted);
        self.tokens -= granted as f64;
        granted
    }

    /// Sets the rate (a stream's fair share moves as streams come and go);
    /// tokens saved above what the new rate saves are dropped.
    fn limit_to(&mut self, rate: u32, now: Instant) {
        self.refill(now);
        self.rate = f64::from(rate);
        self.tokens = self.tokens.min(self.most());
    }

    /// Gives back calls granted but not made.
    pub(super) fn give_back(&mut self, calls: usize) {
        self.tokens = (self.tokens + calls as f64).min(self.most());
    }
}

/// A stream's rate: its own cap, or its even share of the instance's rate
/// among the streams open, whichever is lower (at least one call a second),
/// so many streams cannot take the instance's budget first and leave the
/// others none.
pub(super) fn fair_rate(stream_rate: u32, instance_rate: u32, streams: usize) -> u32 {
    let streams = u32::try_from(streams.max(1)).unwrap_or(u32::MAX);
    stream_rate.min(instance_rate / streams).max(1)
}

/// The instance's budget, shared by its streams (never touched by a
/// `ShouldRateLimit` request).
#[derive(Debug)]
pub(super) struct SharedBudget(Mutex<CallBudget>);

impl SharedBudget {
    pub(super) fn new(rate: u32) -> SharedBudget {
        SharedBudget(Mutex::new(CallBudget::new(rate, Instant::now())))
    }

    /// Calls a stream may make now at `rate`: what both its own budget and
    /// the instance's grant.
    pub(super) fn grant(&self, own: &mut CallBudget, wanted: usize, rate: u32) -> usize {
        let now = Instant::now();
        own.limit_to(rate, now);
        let mine = own.take(wanted, now);
        let granted = self.0.lock().take(mine, now);
        own.give_back(mine - granted);
        granted
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
