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
    /// The last chunk taken, and the hits served from the lease since
    /// `since_us`.
    pub(super) chunk: u64,
    pub(super) spent: u64,
    /// The count the store last reported.
    pub(super) seen: u64,
    /// A take in flight since this µs (0: none): the others ask plainly
    /// (`Plan::Behind`).
    pub(super) taking_us: u64,
    /// The next segment, taken ahead while this one is spent (first and
    /// last position, and when its take was sent), and a take ahead in
    /// flight since this µs (0: none):
    /// the requests meanwhile are answered from the lease ([`super::ahead`]).
    pub(super) ahead: Option<(u64, u64, u64)>,
    pub(super) renewing_us: u64,
    /// Since when, in µs, the lease's hits `spent` were spent (its first
    /// segment was had): the key's rate.
    pub(super) since_us: u64,
    /// When the take of the newest segment held was sent, in µs: a take
    /// ahead sent before it cannot judge it.
    pub(super) taken_us: u64,
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
            ahead: None,
            renewing_us: 0,
            since_us: inc.at_us,
            taken_us: inc.at_us,
            back: None,
        }
    }

    /// Whether a newcomer may take this entry's place: nothing leased is
    /// left in it and no take is in flight for it.
    pub(super) fn idle(&self) -> bool {
        self.left() == 0 && self.taking_us == 0 && self.renewing_us == 0
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

    /// Leased positions not spent yet, the segment taken ahead included.
    pub(super) fn left(&self) -> u64 {
        let ahead = self.ahead.map_or(0, |(first, last, _)| {
            last.saturating_add(1).saturating_sub(first)
        });
        self.current().saturating_add(ahead)
    }

    /// Positions not spent yet of the current segment.
    pub(super) fn current(&self) -> u64 {
        self.last.saturating_add(1).saturating_sub(self.next)
    }

    /// Moves on to the segment taken ahead, when the current one cannot
    /// serve `hits`; returns the positions of the current one dropped.
    pub(super) fn advance(&mut self, hits: u64) -> u64 {
        let Some((first, last, _)) = self.ahead.filter(|_| self.current() < hits) else {
            return 0;
        };
        let dropped = self.current();
        self.next = first;
        self.last = last;
        // The key's rate (what was spent since `since_us`) runs on across
        // segments: measured afresh at each, a segment would set off its
        // take ahead too late to land before it is spent.
        self.ahead = None;
        dropped
    }
}
