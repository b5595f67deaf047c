//! The renewer: takes ahead ([`crate::allowance`]'s `ahead`) sent in the
//! background, batched, for no request's hits, so the requests that set
//! them off are answered from their lease at once. At most one is in
//! flight per lease, so the queue holds at most a take per leased counter
//! (`--allowance-keys`).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Resilient;
use crate::limiter::Now;
use crate::{Increment, Take};

/// Takes ahead waiting to be sent.
#[derive(Debug, Default)]
pub(super) struct Renewals {
    queue: Mutex<Vec<Increment>>,
    wake: Notify,
}

impl Resilient {
    /// Queues a take of `chunk` hits ahead of `inc`'s lease.
    pub(super) fn renew_ahead(&self, inc: &Increment, chunk: u64) {
        let take = Increment {
            hits: chunk,
            // Run after it is given up, it counts nothing.
            take: Some(Take {
                own: 0,
                until_us: self.given_up_us(None),
            }),
            late: None,
            ..inc.clone()
        };
        self.renewals.queue.lock().push(take);
        self.renewals.wake.notify_one();
    }

    /// Sends what is queued, in one call each round, until cancelled; a
    /// round does not wait for the last one's answer (a take ahead queued
    /// behind a far store's round trip would land a round trip late).
    pub(super) async fn renewer(self: Arc<Self>, token: CancellationToken) {
        let mut rounds = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                () = self.renewals.wake.notified() => {}
                Some(_) = rounds.join_next(), if !rounds.is_empty() => continue,
                () = token.cancelled() => return,
            }
            let batch = std::mem::take(&mut *self.renewals.queue.lock());
            if !batch.is_empty() {
                rounds.spawn(self.clone().send_ahead(batch));
            }
        }
    }

    /// One round of takes ahead: counted, each landed in its lease.
    async fn send_ahead(self: Arc<Self>, batch: Vec<Increment>) {
        let refs: Vec<&Increment> = batch.iter().collect();
        let sent_us = Now::wall_us();
        let got = self.ask_primary(&refs, None).await;
        let had_us = Now::wall_us();
        self.observer.allowance_ahead(batch.len() as u64);
        match got {
            Ok(tallies) => {
                self.allowance.round_trip(had_us.saturating_sub(sent_us));
                for (inc, t) in batch.iter().zip(tallies) {
                    self.cache.record(inc, &t);
                    self.allowance.took_ahead(inc, t, had_us);
                }
            }
            Err(_) => batch
                .iter()
                .for_each(|inc| self.allowance.ahead_failed(inc)),
        }
    }
}
