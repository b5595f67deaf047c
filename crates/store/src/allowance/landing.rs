//! A refusal that meets a take in flight waits for the take to land.
//!
//! A request asked while a take of its counter was in flight was counted
//! by the store after the take, so when its count comes back past the limit
//! the positions it missed are the ones the take leases. Had it been
//! refused before the take's answer was handled (another task, maybe
//! later), those positions would be leased after the last request wanting
//! them and never spent: the limit under-admitted. So it waits for the
//! take, no longer than what is left of its store timeout, and is answered
//! from the lease.

use tokio::time::Instant;

use super::Allowance;
use super::lease::Lease;
use crate::limiter::Tally;
use crate::{CounterKey, Increment};

impl Allowance {
    /// A plain answer that refuses `inc` (its count past the limit) while
    /// this instance holds leased hits of the counter: answered from the
    /// lease instead, so no instance refuses while it holds allowance (a
    /// request planned while a take was in flight comes back after it).
    /// The store counted its own hits as it counts every refusal's.
    pub(crate) fn rescue(&self, inc: &Increment, tally: Tally) -> Tally {
        if !self.refused(inc, tally) {
            return tally;
        }
        let mut map = self.shard(&inc.key).lock();
        match map.get_mut(&inc.key) {
            Some(l) => self.serve_refused(l, inc, tally),
            None => tally,
        }
    }

    /// A refusal `tally` of `inc` answered from `l` when it has a position
    /// for it. The request's own hits were counted by the store, so the
    /// usage hears of them as counted, and the position it spends is given
    /// back when the window ends: it counts once, as without leases.
    fn serve_refused(&self, l: &mut Lease, inc: &Increment, tally: Tally) -> Tally {
        let Some(pos) = l.spend(inc) else {
            return tally;
        };
        if let (Some(usage), Some(_)) = (&inc.leased_usage, &l.back) {
            usage.counted_late(inc, tally);
            self.owe(l.back.as_ref(), inc.hits, l.end_s);
        }
        Tally::Leased(pos)
    }

    /// Whether `tally` refuses a leasable `inc`.
    fn refused(&self, inc: &Increment, tally: Tally) -> bool {
        matches!(tally, Tally::Count(after) if after > u64::from(inc.limit)) && self.eligible(inc)
    }

    /// `tally`, the store's plain answer for `inc`; a refusal while a take
    /// of its counter is in flight is answered from the take's lease once
    /// it lands, or stays a refusal at `until`.
    pub(crate) async fn behind_take(&self, inc: &Increment, tally: Tally, until: Instant) -> Tally {
        if !self.refused(inc, tally) {
            return tally;
        }
        loop {
            let landed = self.notify(&inc.key).notified();
            let mut landed = std::pin::pin!(landed);
            // Registered before the look, so a landing in between wakes it.
            landed.as_mut().enable();
            let answer = {
                let mut map = self.shard(&inc.key).lock();
                match map.get_mut(&inc.key) {
                    Some(l) if l.taking_us != 0 => None,
                    Some(l) => Some(self.serve_refused(l, inc, tally)),
                    None => Some(tally),
                }
            };
            if let Some(answer) = answer {
                return answer;
            }
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return tally;
            }
        }
    }

    /// Wakes whoever waits for a take of `key`'s shard.
    pub(super) fn land(&self, key: &CounterKey) {
        self.notify(key).notify_waiters();
    }

    #[allow(
        clippy::indexing_slicing,
        reason = "the index is taken modulo the shard count, the notifiers' length"
    )]
    fn notify(&self, key: &CounterKey) -> &tokio::sync::Notify {
        &self.landed[self.index(key)]
    }
}
