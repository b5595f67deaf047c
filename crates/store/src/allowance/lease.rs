//! One instance's lease of a counter: the positions it may give, and what
//! sizes its next chunk.

use std::sync::Arc;

use crate::Increment;
use crate::limiter::{WindowStart, clock};

/// Positions leased of one counter, or the last plain answer for it.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) start: WindowStart,
    pub(super) end_s: u64,
    /// The next position to give, and the last one this instance may.
    pub(super) next: u64,
    pub(super) last: u64,
    /// When the lease (or the plain answer) was had, in µs.
    pub(super) at_us: u64,
    /// The last chunk taken and the hits served from it.
    pub(super) chunk: u64,
    pub(super) spent: u64,
    /// The count the store last reported.
    pub(super) seen: u64,
    /// A take in flight since this µs (0: none): the others ask plainly
    /// (`Plan::Behind`).
    pub(super) taking_us: u64,
    /// How to give back positions never spent (a refund of the counter,
    /// its usage told), for a take's lease whose usage someone hears.
    pub(super) back: Option<Arc<Increment>>,
}

impl Lease {
    /// The entry of a plain answer: the store's count `after` for `inc`,
    /// no position of it leased.
    pub(super) fn of(inc: &Increment, after: u64) -> Lease {
        Lease {
            start: inc.window.start,
            end_s: inc.window.end(),
            next: after.saturating_add(1),
            last: after,
            at_us: inc.at_us,
            chunk: inc.hits,
            spent: inc.hits,
            seen: after,
            taking_us: 0,
            back: None,
        }
    }

    /// Whether a newcomer may take this entry's place: nothing leased is
    /// left in it and no take is in flight for it.
    pub(super) fn idle(&self) -> bool {
        self.left() == 0 && self.taking_us == 0
    }

    /// Gives `inc` the next position of this lease, when the lease is of
    /// its window and the position is within the lease and `inc`'s limit.
    /// Not in the window's last [`clock::guard_us`]: this instance's clock may be
    /// that far from the store's, whose window may have ended.
    pub(super) fn spend(&mut self, inc: &Increment) -> Option<u64> {
        let pos = self.next.saturating_add(inc.hits - 1);
        if self.start != inc.window.start || pos > self.last || pos > u64::from(inc.limit) {
            return None;
        }
        if inc.at_us.saturating_add(clock::guard_us()) >= self.end_s.saturating_mul(1_000_000) {
            return None;
        }
        self.next = pos.saturating_add(1);
        self.spent = self.spent.saturating_add(inc.hits);
        Some(pos)
    }

    /// Leased positions not spent yet.
    pub(super) fn left(&self) -> u64 {
        self.last.saturating_add(1).saturating_sub(self.next)
    }
}
