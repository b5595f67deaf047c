//! Positions leased and never spent, given back to the store once their
//! window has ended, so the count the usage levels are read from is what
//! was used.
//!
//! A take counts its whole chunk at once, and the chunk's positions cross
//! the usage levels then ([`crate::CountedLate::counted_late`] with the
//! take): the count's walk up. Positions never spent (the window ended
//! first, a take replaced the lease, a refused request was answered from
//! the lease after its own hits were counted, a chunk past the limit) are
//! given back by a refund once the window has ended, and the walk down
//! crosses their levels back ([`crate::CountedLate::leased_back`]). A walk
//! from 0 to a count crosses each level at or under it once more up than
//! down, whatever the order of its steps, so each level counts each key
//! once per window, exactly as without leases. Not before the window ends:
//! a count that falls mid-window would void other instances' leases, whose
//! positions it no longer covers.
//!
//! A give-back whose answer never comes (the store slower than its timeout)
//! may have been taken back unheard: the usage may read over by it, and
//! the observer counts its positions (`allowance_unsettled`).
//!
//! The queue holds at most as many give-backs as the instance may hold
//! leases (`--allowance-keys`); past it a give-back is dropped and its
//! positions stay counted (the usage over by them).

use std::sync::Arc;

use super::Allowance;
use super::lease::Lease;
use crate::Increment;
use crate::limiter::Now;

impl Allowance {
    /// Owes back the positions `l` leased and will never spend.
    pub(super) fn owe_left(&self, l: &Lease) {
        self.owe(l.back.as_ref(), l.left(), l.end_s);
    }

    /// Owes back `hits` positions of the counter `back` gives back, once
    /// its window (ending at `end_s`) has ended.
    pub(super) fn owe(&self, back: Option<&Arc<Increment>>, hits: u64, end_s: u64) {
        let Some(back) = back.filter(|_| hits > 0) else {
            return;
        };
        let mut owed = self.owed.lock();
        if owed.len() >= self.per_shard.saturating_mul(super::SHARDS) {
            return;
        }
        owed.push((
            end_s,
            Increment {
                hits,
                ..Increment::clone(back)
            },
        ));
    }

    /// The give-backs whose window ended by `now`: refunds to send, each
    /// told to its usage when the store answers.
    pub(crate) fn due_back(&self, now: Now) -> Vec<Increment> {
        let mut owed = self.owed.lock();
        if owed.is_empty() {
            return Vec::new();
        }
        let (due, later): (Vec<_>, Vec<_>) = owed.drain(..).partition(|(end, _)| *end <= now.0);
        *owed = later;
        due.into_iter().map(|(_, inc)| inc).collect()
    }

    /// The refund that gives back positions of the counter `inc` takes a
    /// chunk of, when someone hears its usage: dated in the window's last
    /// second, so the store finds the window's key.
    pub(super) fn back_of(inc: &Increment) -> Option<Arc<Increment>> {
        inc.leased_usage.as_ref()?;
        let last_us = inc.window.end().saturating_sub(1).saturating_mul(1_000_000);
        Some(Arc::new(Increment {
            hits: 0,
            refund: true,
            at_us: last_us,
            late: None,
            take: None,
            count_after: false,
            ..inc.clone()
        }))
    }
}

#[cfg(test)]
#[path = "give_back_tests.rs"]
mod tests;
