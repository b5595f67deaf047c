//! Leased allowance: a hot fixed-window counter far from its limit is
//! answered in memory from a chunk of the limit taken from the shared store
//! in one atomic step, instead of one store call per request.
//!
//! A take is an ordinary increment by the chunk: the store's count then
//! includes the whole chunk, so the positions it covers (count before + 1
//! up to count after) belong to this instance alone, and every instance
//! admits only positions at or under the limit. Admitted requests per window
//! therefore never exceed the limit, across any number of instances. What
//! a lease does not spend is never admitted by anyone (under-admission):
//!
//! - a chunk is at most an eighth of the headroom the store last reported
//!   (the limit less the count), and at most `--allowance-max-chunk`, so
//!   near the limit there is nothing to lease and every request asks the
//!   store, as without leases;
//! - an instance holds at most one lease per counter;
//! - a lease is trusted for half a second ([`TRUST_US`], as a remembered
//!   refusal is); then one request asks the store plainly, and its count
//!   renews the lease (nothing took its positions back) or voids it (the
//!   count fell below them: a reset through another instance), so a reset
//!   is seen within that;
//! - a chunk grows only by doubling after one was spent while trusted, and
//!   is what was spent otherwise, so a slow key takes no chunk at all;
//! - a take carries when its caller gives it up ([`crate::Take`]): a store
//!   that runs it later (stopped or throttled while the take waited in its
//!   queue) counts the request's own hits instead of the chunk, so a take
//!   given up never counts positions no one will admit.
//!
//! A request asked while a take of its counter is in flight skips the
//! over-limit cache, and a refusal it gets waits, within the store timeout,
//! for the take to land ([`landing`]): the take was counted first, so its
//! leased positions are the ones the refusal missed.
//!
//! Each request is answered with its own position as the count, the count
//! it would have got had every leased position before it been spent: so a
//! refusal and `limit_remaining` are those of a count short of the store's
//! by at most the chunks other instances hold. The usage levels are read
//! from the store's count as it moves: a take's whole chunk when it is
//! counted, positions never spent given back once the window has ended
//! ([`give_back`]), so a window's usage is exactly what was used.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{CounterKey, Increment};
use crate::limiter::{Algorithm, Now, Tally};

mod ahead;
mod give_back;
mod landing;
mod lease;
mod remember;

use lease::Lease;

const SHARDS: usize = 16;

/// How long a lease is trusted, in µs: the bound on how long another
/// instance's reset can go unseen here.
const TRUST_US: u64 = 500_000;

/// A chunk is at most this fraction of the headroom (1/8).
const HEADROOM_SHARE: u64 = 8;

/// Whose answer a lease entry is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A take of a chunk: its lease replaces the entry.
    Take,
    /// A request's own hits: remembered for its next request's chunk.
    Plain,
}

/// Entries looked at to make room in a full shard.
const SAMPLE: usize = 8;

/// What to do with one increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Answered from this instance's lease.
    Served(Tally),
    /// Answered from this instance's lease, and a chunk of this many hits
    /// to take ahead in the background ([`ahead`]).
    Ahead(Tally, u64),
    /// Ask the store for `chunk` hits instead of the request's own.
    Take { chunk: u64 },
    /// Ask the store as without leases.
    Plain,
    /// Ask the store plainly, never the over-limit cache: a take of the
    /// counter is in flight, and a refusal waits for it to land.
    Behind,
}

/// Leases of one instance, bounded in counters.
#[derive(Debug)]
pub(crate) struct Allowance {
    shards: Box<[Mutex<HashMap<CounterKey, Lease>>]>,
    /// Per shard: woken when a take of one of its counters lands or is
    /// given up.
    landed: Box<[Notify]>,
    per_shard: usize,
    max_chunk: u64,
    hasher: RandomState,
    /// Leased positions never spent since last read (under-admission).
    stranded: AtomicU64,
    /// Positions never spent, to give back once their window (ending at
    /// the second held) has ended ([`give_back`]).
    owed: Mutex<Vec<(u64, Increment)>>,
    /// The store's round trip as takes see it, smoothed, in µs: how far
    /// ahead a lease is renewed ([`ahead`]).
    rtt_us: AtomicU64,
    /// Whether leases are renewed ahead (`--allowance-ahead`).
    ahead: bool,
}

impl Allowance {
    /// At most `capacity` counters (0 turns leasing off), each chunk at
    /// most `max_chunk` hits.
    pub(crate) fn new(capacity: usize, max_chunk: u64) -> Allowance {
        Allowance {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            landed: (0..SHARDS).map(|_| Notify::new()).collect(),
            per_shard: if max_chunk < 2 {
                0
            } else {
                capacity.div_ceil(SHARDS)
            },
            max_chunk,
            hasher: RandomState::new(),
            stranded: AtomicU64::new(0),
            owed: Mutex::new(Vec::new()),
            rtt_us: AtomicU64::new(0),
            ahead: true,
        }
    }

    #[allow(
        clippy::indexing_slicing,
        reason = "the index is taken modulo the shard count"
    )]
    fn shard(&self, key: &CounterKey) -> &Mutex<HashMap<CounterKey, Lease>> {
        &self.shards[self.index(key)]
    }

    fn index(&self, key: &CounterKey) -> usize {
        self.hasher.hash_one(key) as usize % SHARDS
    }

    fn eligible(&self, inc: &Increment) -> bool {
        self.per_shard > 0
            && inc.leasable
            && inc.algorithm == Algorithm::FixedWindow
            && !inc.refund
            && inc.slot.is_none()
            && inc.hits > 0
    }

    /// How `inc` is answered: from a lease, by taking one, or plainly.
    pub(crate) fn plan(&self, inc: &Increment) -> Plan {
        if !self.eligible(inc) {
            return Plan::Plain;
        }
        let mut map = self.shard(&inc.key).lock();
        let Some(l) = map.get_mut(&inc.key) else {
            return Plan::Plain;
        };
        let same = l.start == inc.window.start;
        let trusted = inc.at_us < l.at_us.saturating_add(TRUST_US);
        if trusted
            && l.taking_us == 0
            && let Some(plan) = self.serve(l, inc)
        {
            return plan;
        }
        if l.taking_us != 0 && inc.at_us < l.taking_us.saturating_add(TRUST_US) {
            return Plan::Behind;
        }
        // Positions left but not trusted now: the store is asked plainly,
        // and its count renews the lease or voids it (see `answered`).
        if same && l.left() > 0 {
            return Plan::Plain;
        }
        let chunk = self.chunk(l, inc, same && trusted);
        if chunk <= inc.hits {
            return Plan::Plain;
        }
        self.strand(l);
        // A lease of an ended window: its positions go back to its count.
        if l.end_s <= inc.window.start.0 {
            self.owe_left(l);
        }
        l.next = l.last.saturating_add(1);
        l.taking_us = inc.at_us.max(1);
        Plan::Take { chunk }
    }

    /// The next chunk for `l`: doubled when the last was spent while
    /// trusted, what was spent otherwise, within an eighth of the headroom
    /// and the cap.
    fn chunk(&self, l: &Lease, inc: &Increment, fresh: bool) -> u64 {
        let seen = if l.start == inc.window.start {
            l.seen
        } else {
            0
        };
        let headroom = u64::from(inc.limit).saturating_sub(seen);
        let want = if fresh && l.left() == 0 {
            l.chunk.saturating_mul(2).max(2)
        } else {
            l.spent.max(1)
        };
        want.min(headroom / HEADROOM_SHARE).min(self.max_chunk)
    }

    /// The store answered `sent`, a take of a chunk for `inc`, with
    /// `tally`: the request's own answer, its position; the rest of the
    /// chunk (up to the limit) is leased, and the usage hears of the whole
    /// chunk as counted ([`give_back`]).
    /// `had_us`: the clock when the answer came, from which the lease is
    /// trusted (a request that starts later asks the store after the take's
    /// count, so its answer can judge the lease).
    pub(crate) fn took(
        &self,
        inc: &Increment,
        sent: &Increment,
        tally: Tally,
        had_us: u64,
    ) -> Tally {
        let chunk = sent.hits;
        self.round_trip(had_us.saturating_sub(sent.at_us));
        let after = match tally {
            Tally::Count(after) => after,
            // Counted for the request's own hits only (in the store's window,
            // not the one asked; or run after the take was given up):
            // nothing is leased, and the count is the request's own.
            Tally::Moved(after) => {
                self.abandon(inc);
                return Tally::Moved(after);
            }
            _ => {
                self.abandon(inc);
                return tally;
            }
        };
        let pos = after.saturating_sub(chunk).saturating_add(inc.hits);
        let lease = Lease {
            next: pos.saturating_add(1),
            last: after.min(u64::from(inc.limit)),
            at_us: had_us.max(inc.at_us),
            since_us: had_us.max(inc.at_us),
            chunk,
            back: Self::back_of(inc),
            ..Lease::of(inc, after)
        };
        if let Some(usage) = &inc.leased_usage {
            usage.counted_late(sent, tally);
            // Positions past the limit are never spent by anyone.
            let past = after.saturating_sub(u64::from(inc.limit).max(pos));
            self.owe(lease.back.as_ref(), past, lease.end_s);
        }
        self.remember(inc, lease, Source::Take);
        Tally::Leased(pos)
    }

    /// The store answered `inc` plainly with `tally`: remembered, so the
    /// key's next request may take a chunk.
    pub(crate) fn answered(&self, inc: &Increment, tally: &Tally) {
        if let Tally::Count(after) = *tally
            && self.eligible(inc)
        {
            self.remember(inc, Lease::of(inc, after), Source::Plain);
        }
    }

    /// A take that got no count (the store failed, or its caller went
    /// away): the next may try again. Another take since (this one ran past
    /// its trust) is left alone.
    pub(crate) fn abandon(&self, inc: &Increment) {
        if let Some(l) = self.shard(&inc.key).lock().get_mut(&inc.key)
            && l.taking_us == inc.at_us.max(1)
        {
            l.taking_us = 0;
        }
        self.land(&inc.key);
    }

    /// Voids this instance's lease of a counter (a reset).
    pub(crate) fn forget(&self, key: &CounterKey) {
        if self.per_shard > 0 {
            self.shard(key).lock().remove(key);
            self.land(key);
            // What the reset cleared is not given back to the new count.
            self.owed.lock().retain(|(_, inc)| inc.key != *key);
        }
    }

    /// Frees leases whose window has ended: their unspent positions are
    /// stranded. Returns the positions stranded since the last sweep.
    pub(crate) fn sweep(&self, now: Now) -> u64 {
        for shard in self.shards.iter() {
            shard.lock().retain(|_, l| {
                let keep = l.end_s > now.0;
                if !keep {
                    self.strand(l);
                    self.owe_left(l);
                }
                keep
            });
        }
        self.stranded.swap(0, Relaxed)
    }

    /// Counts what `l` leased and will never spend.
    fn strand(&self, l: &Lease) {
        let left = l.left();
        if left > 0 {
            self.stranded.fetch_add(left, Relaxed);
        }
    }
}

#[cfg(test)]
#[path = "allowance_tests.rs"]
mod tests;
