//! The settler: hits answered on credit ([`crate::credit`]) counted in the
//! store in the background, every `--count-after-interval` or at once when a
//! key's credit is spent, each round without waiting for the last (a far
//! store's round trip would hold the next round back). At most one count
//! of a key is in flight, which the credit's bound rests on.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Resilient;
use crate::Increment;

impl Resilient {
    /// Counts what is owed, until cancelled.
    pub(super) async fn settler(self: Arc<Self>, token: CancellationToken) {
        let mut tick = tokio::time::interval(self.count_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rounds = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.credit.wake.notified() => {}
                Some(_) = rounds.join_next(), if !rounds.is_empty() => continue,
                () = token.cancelled() => return,
            }
            let due = self.credit.take_due();
            if !due.is_empty() {
                rounds.spawn(self.clone().count_owed(due));
            }
        }
    }

    /// One round: each counter's owed hits in one call, the counts landed.
    async fn count_owed(self: Arc<Self>, due: Vec<Increment>) {
        let refs: Vec<&Increment> = due.iter().collect();
        let got = self.ask_primary(&refs, None).await;
        self.observer.credit(0, due.len() as u64);
        match got {
            Ok(tallies) => {
                for (inc, t) in due.iter().zip(tallies) {
                    self.cache.record(inc, &t);
                    self.credit.landed(inc, Some(t));
                }
            }
            Err(_) => due.iter().for_each(|inc| self.credit.landed(inc, None)),
        }
    }
}
