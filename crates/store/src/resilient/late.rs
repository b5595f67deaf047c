//! A shadow-mode rule's hits answered from the over-limit cache, counted in
//! the store in the background: one increment per counter a quarter second,
//! so a flood of a shadow rule costs the store what a flood of an enforced
//! one does, and the store's count (the usage the advisor reads) stays the
//! whole demand.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Resilient;
use crate::Increment;
use crate::limiter::Tally;

/// How often the hits kept in the cache are counted in the store.
pub(super) const LATE_EVERY: Duration = Duration::from_millis(250);

impl Resilient {
    /// Counts what is due every [`LATE_EVERY`] until cancelled.
    pub(super) async fn count_late(self: Arc<Self>, token: CancellationToken) {
        let mut tick = tokio::time::interval(LATE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = token.cancelled() => return,
            }
            self.count_due().await;
        }
    }

    /// One round: the hits due, counted in one call, each counter's new
    /// count remembered and told to its listener. Hits the store could not
    /// count are lost to the usage only: their requests were answered.
    /// Then leased positions never spent, whose window has ended, given
    /// back to the store, each counter's usage told of the count's walk
    /// down (`allowance`'s `give_back`): positions the store could not take
    /// back stay counted, the usage over by them.
    pub(super) async fn count_due(&self) {
        let back = self.allowance.due_back(crate::limiter::Now::wall());
        let answered = self.ask_all(&back).await;
        if answered.is_empty() && !back.is_empty() {
            self.observer
                .allowance_unsettled(back.iter().map(|inc| inc.hits).sum());
        }
        for (inc, tally) in answered {
            if let Some(usage) = &inc.leased_usage {
                usage.leased_back(inc, tally);
            }
        }
        let due = self.cache.due();
        for (inc, tally) in self.ask_all(&due).await {
            self.cache.record(inc, &tally);
            if let Some(late) = &inc.late {
                late.counted_late(inc, tally);
            }
        }
    }

    /// `incs` counted in one call, each with its count; none when the store
    /// could not count them.
    async fn ask_all<'a>(&self, incs: &'a [Increment]) -> Vec<(&'a Increment, Tally)> {
        if incs.is_empty() {
            return Vec::new();
        }
        let refs: Vec<&Increment> = incs.iter().collect();
        match self.ask_primary(&refs, None).await {
            Ok(tallies) => incs.iter().zip(tallies).collect(),
            Err(_) => Vec::new(),
        }
    }
}
