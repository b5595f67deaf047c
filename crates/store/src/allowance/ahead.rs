//! Renewing a lease before it runs out, so a hot key never waits for a far
//! store.
//!
//! Without it a lease ends in one of two ways, each a store round trip that
//! the requests behind it wait for: its positions run out (a take, and the
//! requests meanwhile ask the store plainly), or its trust lapses (one
//! request asks plainly, to learn whether a reset took its positions back).
//! With the store 80 ms away that is every key's p99.
//!
//! So a request answered from a lease may also set off a take ahead: when
//! what is left of the current segment lasts less than the lead (twice the
//! store's measured round trip, plus a margin) at the rate the key spends
//! it, or the trust lapses within the lead. The take is sent in the
//! background ([`crate::resilient`]'s renewer) for no request's hits, and
//! every request meanwhile is still answered from the lease. When it lands:
//!
//! - its count before the chunk at or past the lease's last position says
//!   nothing took the current segment back (as a plain answer renews a
//!   lease), so the lease is trusted anew and the chunk is queued as the
//!   next segment, spent once the current one cannot serve a request;
//! - a count below it (a reset through another instance) voids the current
//!   segment, and the chunk becomes the lease.
//!
//! Every chunk is counted in the store before any of it is spent, as every
//! take's is, so the fleet never admits past the limit; a chunk is at most
//! an eighth of the headroom, as every take's is, so near the limit there
//! is nothing to take ahead and every request asks the store. Positions
//! never spent are given back when the window ends, as a take's are.

use std::sync::atomic::Ordering::Relaxed;

use super::lease::Lease;
use super::{Allowance, HEADROOM_SHARE, Plan, TRUST_US};
use crate::Increment;
use crate::limiter::{Tally, clock};

/// How many of the store's round trips ahead a lease is renewed: one for
/// the take, the rest for the key's rate to vary and the instance to be
/// late.
const LEAD_RTTS: u64 = 3;
/// Added to the round trips: a scheduling margin.
const MARGIN_US: u64 = 10_000;
/// A chunk taken ahead is at most this many times the last.
const GROWTH: u64 = 4;
/// The least chunk worth taking ahead: a smaller one (a limit of a few
/// dozen, whose eighth of the headroom is a handful) is a key whose
/// answers' `limit_remaining` a client reads one by one, and a chunk taken
/// ahead and overtaken by a take for a waiting request would hand out its
/// positions after higher ones.
const MIN_CHUNK: u64 = 16;

impl Allowance {
    /// Leases renewed ahead of running out (`ahead`), or only when they do.
    pub(crate) fn renewing_ahead(self, ahead: bool) -> Allowance {
        Allowance { ahead, ..self }
    }

    /// `inc` answered from the trusted lease `l` (its queued segment once
    /// the current one cannot serve it), and a take ahead set off if due;
    /// `None` when the lease has no position for it.
    pub(super) fn serve(&self, l: &mut Lease, inc: &Increment) -> Option<Plan> {
        let dropped = l.advance(inc.hits);
        if dropped > 0 {
            self.drop_chunk(l.back.clone().as_ref(), dropped, l.end_s);
        }
        let served = Tally::Leased(l.spend(inc)?);
        Some(match self.ahead_due(l, inc) {
            Some(chunk) => {
                l.renewing_us = inc.at_us.max(1);
                Plan::Ahead(served, chunk)
            }
            None => Plan::Served(served),
        })
    }

    /// The chunk to take ahead for `l` now, after `inc` was answered from
    /// it, if it is due: what the key spends in a trust period and the
    /// lead, at least the last chunk, within the headroom's share and the
    /// cap.
    pub(super) fn ahead_due(&self, l: &Lease, inc: &Increment) -> Option<u64> {
        if !self.ahead || l.renewing_us != 0 || l.start != inc.window.start {
            return None;
        }
        let lead = self.rtt_us.load(Relaxed).saturating_mul(LEAD_RTTS) + MARGIN_US;
        // Not when the window ends before the chunk could be spent.
        let end_us = l.end_s.saturating_mul(1_000_000);
        if inc.at_us + lead + clock::guard_us() >= end_us {
            return None;
        }
        // The trust about to lapse with nothing else due: renewed by a take
        // of nothing (its count says whether a reset took positions back).
        let stale = inc.at_us.saturating_sub(l.at_us) + lead >= TRUST_US;
        // A key seen for less than the lead has shown no rate yet (three
        // quick requests are not a hot key), and a lease with a segment
        // queued has its next chunk.
        let seen_us = inc.at_us.saturating_sub(l.since_us);
        let low = l.ahead.is_none()
            && seen_us >= lead
            && l.current() <= (l.spent.saturating_mul(lead) / seen_us).saturating_add(inc.hits);
        if !low {
            return stale.then_some(0);
        }
        let elapsed = seen_us;
        // What the key spends in a trust period and the lead, growing at
        // most fourfold a take.
        let want = (l.spent.saturating_mul(TRUST_US + lead) / elapsed)
            .clamp(l.chunk, l.chunk.saturating_mul(GROWTH));
        let headroom = u64::from(inc.limit).saturating_sub(l.seen);
        let chunk = want.min(headroom / HEADROOM_SHARE).min(self.max_chunk);
        if chunk >= MIN_CHUNK {
            Some(chunk)
        } else {
            stale.then_some(0)
        }
    }

    /// The store answered `sent`, a take ahead, with `tally` at `had_us`:
    /// its chunk queued as the lease's next segment, the lease trusted
    /// anew, or the current segment voided (see the module's words).
    pub(crate) fn took_ahead(&self, sent: &Increment, tally: Tally, had_us: u64) {
        let mut map = self.shard(&sent.key).lock();
        let lease = map.get_mut(&sent.key);
        let Tally::Count(after) = tally else {
            // Run after it was given up (its own 0 hits counted), or in
            // another window: nothing was leased.
            if let Some(l) = lease {
                l.renewing_us = 0;
            }
            return;
        };
        let chunk = sent.hits;
        let (first, last) = (
            after.saturating_sub(chunk) + 1,
            after.min(u64::from(sent.limit)),
        );
        let back = Self::back_of(sent);
        if let Some(usage) = &sent.leased_usage {
            usage.counted_late(sent, tally);
            // Positions past the limit are never spent by anyone.
            let past = after.saturating_sub(u64::from(sent.limit).max(first - 1));
            self.owe(back.as_ref(), past, sent.window.end());
        }
        let queued = last.saturating_add(1).saturating_sub(first);
        let Some(l) = lease.filter(|l| l.start == sent.window.start) else {
            // The lease is gone, or of another window: the chunk is never
            // spent.
            self.drop_chunk(back.as_ref(), queued, sent.window.end());
            return;
        };
        self.land_ahead(l, sent, (first, last, after), had_us, back);
    }

    /// Lands a take ahead's chunk `(first, last)` (the store's count
    /// `after`) in its lease `l`: queued, or the lease when the count says
    /// a reset took back what it held, the lease trusted anew.
    fn land_ahead(
        &self,
        l: &mut Lease,
        sent: &Increment,
        (first, last, after): (u64, u64, u64),
        had_us: u64,
        back: Option<std::sync::Arc<Increment>>,
    ) {
        let (chunk, queued) = (sent.hits, last.saturating_add(1).saturating_sub(first));
        l.renewing_us = 0;
        l.seen = l.seen.max(after);
        // The highest position this lease holds, queued segment included;
        // a segment whose take was sent after this one says nothing of it
        // (the store may have run it after).
        let held = l.ahead.map_or(l.last, |(_, last, _)| last.max(l.last));
        let judged = l.taken_us <= sent.at_us;
        // The current segment spent, a segment queued: that one is current.
        let dropped = l.advance(1);
        if dropped > 0 {
            self.drop_chunk(l.back.clone().as_ref(), dropped, l.end_s);
        }
        if judged && after.saturating_sub(chunk) < held && l.left() > 0 {
            // A reset took what the lease holds back: the chunk is the
            // lease (nothing, for a take of nothing).
            self.strand(l);
            self.owe_left(l);
            (l.next, l.last, l.ahead) = (first, last, None);
            (l.spent, l.since_us, l.taken_us) = (0, had_us, sent.at_us);
        } else if l.ahead.is_none() && queued > 0 {
            l.ahead = Some((first, last, sent.at_us));
            l.taken_us = l.taken_us.max(sent.at_us);
        } else {
            self.drop_chunk(back.as_ref(), queued, sent.window.end());
        }
        if !judged {
            // Trusted from the newer take, not this one.
            return;
        }
        l.at_us = l.at_us.max(had_us);
        if chunk > 0 {
            l.chunk = chunk;
        }
        if l.back.is_none() {
            l.back = back;
        }
    }

    /// A chunk taken ahead that no lease will spend: stranded, and given
    /// back once its window ends.
    fn drop_chunk(&self, back: Option<&std::sync::Arc<Increment>>, hits: u64, end_s: u64) {
        self.stranded.fetch_add(hits, Relaxed);
        self.owe(back, hits, end_s);
    }

    /// A take ahead that got no count (the store failed): the next request
    /// may set off another.
    pub(crate) fn ahead_failed(&self, sent: &Increment) {
        if let Some(l) = self.shard(&sent.key).lock().get_mut(&sent.key) {
            l.renewing_us = 0;
        }
    }

    /// The store's round trip as a take saw it (`us`), smoothed: the lead
    /// a take ahead is sent with.
    pub(crate) fn round_trip(&self, us: u64) {
        let old = self.rtt_us.load(Relaxed);
        let new = if old == 0 { us } else { (old * 7 + us) / 8 };
        self.rtt_us.store(new, Relaxed);
    }
}

#[cfg(test)]
#[path = "ahead_tests.rs"]
mod tests;
