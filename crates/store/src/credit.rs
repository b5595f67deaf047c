//! Counting after: a counter whose rule says `count_after` is answered from
//! this instance's credit, at local speed and before the store has heard of
//! it, and its hits are counted in the store after, in the background
//! ([`crate::resilient`]'s settler). A stated amount of exactness is traded
//! for a cold key never waiting for a far store.
//!
//! An instance admits a request on credit only while
//!
//! - the hits it has answered on credit and the store has not yet counted
//!   (sent or not) stay within the key's credit, `--count-after-credit`
//!   percent of its limit (at least one hit), and
//! - the store's count as last answered here, plus those hits, stays within
//!   the limit;
//!
//! and at most one count of a key is in flight from an instance. So every
//! instance has at most one credit of a key's hits counted after the store's
//! count passed the limit that it admitted before it could know: **a key is
//! admitted at most `instances x credit` past its limit a window**, whatever
//! the round trip or the interval. These set only how fast the credit comes
//! back: a key is answered on credit up to a credit's hits each interval
//! plus round trip; past that its requests take the exact path (a lease or
//! a count of their own), as they do when nothing is known of the key's
//! window yet and the credit is spent, or the store is down (the failure
//! policy decides, never the credit).
//!
//! A count that failed (an error, or no answer in time) is in doubt: the
//! store may have counted it, so it is never sent again (twice counted, it
//! would refuse others under the limit), and may not have, so its hits keep
//! holding the key's credit until the window ends
//! (`sluice_store_credit_doubt_total`). Either way the store lacks at most a
//! credit of this instance's hits, as the bound says. An instance that dies
//! loses what it had not counted: a credit more past the limit for each.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::limiter::{Algorithm, Now, Tally, WindowStart, clock};
use crate::{CounterKey, Increment};

const SHARDS: usize = 16;
/// The count seen once the store counted a key's hits in another window
/// than this instance's clock put them in (a clock stepped, not yet
/// followed): past every limit, so the key takes the exact path for the
/// rest of that window, and its credit was judged against the wrong
/// window's count at most once.
const MOVED: u64 = u64::MAX;

/// What this instance owes the store of one counter's window.
#[derive(Debug)]
struct Owed {
    start: WindowStart,
    end_s: u64,
    /// The store's count as last answered here.
    seen: u64,
    /// Hits answered on credit and not sent yet; sent and not answered;
    /// sent and never answered (in doubt: see the module's words).
    unsent: u64,
    sending: u64,
    doubt: u64,
    /// What the hits are sent as (their count set when sent).
    inc: Increment,
}

impl Owed {
    fn of(inc: &Increment) -> Owed {
        Owed {
            start: inc.window.start,
            end_s: inc.window.end(),
            seen: 0,
            unsent: 0,
            sending: 0,
            doubt: 0,
            inc: Increment {
                late: None,
                take: None,
                count_after: false,
                ..inc.clone()
            },
        }
    }

    /// Hits answered here the store may not have counted.
    fn pending(&self) -> u64 {
        self.unsent
            .saturating_add(self.sending)
            .saturating_add(self.doubt)
    }

    /// Hits still to be counted (not in doubt).
    fn owes(&self) -> bool {
        self.unsent > 0 || self.sending > 0
    }
}

/// The counters this instance answers on credit, bounded in number.
#[derive(Debug)]
pub(crate) struct Credit {
    shards: Box<[Mutex<HashMap<CounterKey, Owed>>]>,
    per_shard: usize,
    /// A key's credit, in percent of its limit.
    percent: u64,
    hasher: RandomState,
    /// Counters with hits to send and none in flight: each at most once.
    due: Mutex<Vec<CounterKey>>,
    /// Woken when a key's credit is spent: sent at once, not at the tick.
    pub(crate) wake: Notify,
    /// Hits answered on credit whose count failed, since last read.
    doubt: AtomicU64,
}

impl Credit {
    /// At most `keys` counters (0: counting after off), a key's credit
    /// `percent` of its limit.
    pub(crate) fn new(keys: usize, percent: u64) -> Credit {
        Credit {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: if percent == 0 {
                0
            } else {
                keys.div_ceil(SHARDS)
            },
            percent,
            hasher: RandomState::new(),
            due: Mutex::new(Vec::new()),
            wake: Notify::new(),
            doubt: AtomicU64::new(0),
        }
    }

    #[allow(
        clippy::indexing_slicing,
        reason = "the index is taken modulo the shard count"
    )]
    fn shard(&self, key: &CounterKey) -> &Mutex<HashMap<CounterKey, Owed>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// A key's credit: its share of the limit, at least one hit.
    pub(crate) fn of(&self, limit: u32) -> u64 {
        (u64::from(limit) * self.percent / 100).max(1)
    }

    /// `inc` answered on credit, its position as the count; `None` when it
    /// takes the exact path (see the module's words).
    pub(crate) fn admit(&self, inc: &Increment) -> Option<Tally> {
        let eligible = inc.count_after
            && self.per_shard > 0
            && inc.algorithm == Algorithm::FixedWindow
            && !inc.refund
            && inc.slot.is_none()
            && inc.hits > 0;
        if !eligible {
            return None;
        }
        let credit = self.of(inc.limit);
        let mut map = self.shard(&inc.key).lock();
        if !map.contains_key(&inc.key) {
            // Full: the newcomer takes the exact path. No entry is dropped
            // before its window ends: seen again, its key would start afresh
            // with a credit more past the limit.
            if map.len() >= self.per_shard {
                return None;
            }
            map.insert(inc.key.clone(), Owed::of(inc));
        }
        let o = map.get_mut(&inc.key)?;
        if o.start != inc.window.start {
            // An earlier window's hits are counted first.
            if o.owes() || o.end_s > inc.window.start.0 {
                return None;
            }
            *o = Owed::of(inc);
        }
        let pending = o.pending().saturating_add(inc.hits);
        let pos = o.seen.saturating_add(pending);
        // Not in the window's last `guard_us` either: the store's window
        // (its clock) may have ended.
        let ending =
            inc.at_us.saturating_add(clock::guard_us()) >= o.end_s.saturating_mul(1_000_000);
        if pending > credit || pos > u64::from(inc.limit) || ending {
            return None;
        }
        let first = o.unsent == 0 && o.sending == 0;
        o.unsent = o.unsent.saturating_add(inc.hits);
        drop(map);
        if first {
            self.due.lock().push(inc.key.clone());
        }
        if pending == credit {
            self.wake.notify_one();
        }
        Some(Tally::Leased(pos))
    }

    /// The counts to send now: each due counter's unsent hits, moved in
    /// flight.
    pub(crate) fn take_due(&self) -> Vec<Increment> {
        let keys = std::mem::take(&mut *self.due.lock());
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let mut map = self.shard(&key).lock();
            if let Some(o) = map.get_mut(&key)
                && o.unsent > 0
                && o.sending == 0
            {
                o.sending = o.unsent;
                o.unsent = 0;
                out.push(Increment {
                    hits: o.sending,
                    ..o.inc.clone()
                });
            }
        }
        out
    }

    /// The store counted `sent` (`Some` count) or the call failed (`None`):
    /// the count is what the key's next credit is judged against; a failed
    /// count is in doubt.
    pub(crate) fn landed(&self, sent: &Increment, tally: Option<Tally>) {
        if let (Some(t), Some(usage)) = (tally, &sent.leased_usage) {
            usage.counted_late(sent, t);
        }
        let mut map = self.shard(&sent.key).lock();
        let Some(o) = map
            .get_mut(&sent.key)
            .filter(|o| o.start == sent.window.start)
        else {
            return;
        };
        match tally {
            Some(Tally::Count(after)) => o.seen = o.seen.max(after),
            // Counted in another window by the store's clock: this
            // instance's view of the window is not the store's, so no more
            // credit for it (see `MOVED`).
            Some(Tally::Moved(_)) => o.seen = MOVED,
            Some(_) => {}
            None => {
                o.doubt = o.doubt.saturating_add(o.sending);
                self.doubt.fetch_add(o.sending, Relaxed);
            }
        }
        o.sending = 0;
        if o.unsent > 0 {
            drop(map);
            self.due.lock().push(sent.key.clone());
        }
    }

    /// The store's count for a request of `inc`'s counter that took the
    /// exact path: the key's next credit is judged against it.
    pub(crate) fn answered(&self, inc: &Increment, tally: &Tally) {
        let after = match *tally {
            Tally::Count(after) => after,
            Tally::Moved(_) => MOVED,
            _ => return,
        };
        if inc.count_after
            && self.per_shard > 0
            && let Some(o) = self.shard(&inc.key).lock().get_mut(&inc.key)
            && o.start == inc.window.start
        {
            o.seen = o.seen.max(after);
        }
    }

    /// A reset: what this instance owes of the counter was cleared with it.
    pub(crate) fn forget(&self, key: &CounterKey) {
        if self.per_shard > 0 {
            self.shard(key).lock().remove(key);
        }
    }

    /// Drops counters whose window has ended with nothing to count;
    /// returns the hits put in doubt since the last sweep.
    pub(crate) fn sweep(&self, now: Now) -> u64 {
        for shard in self.shards.iter() {
            shard.lock().retain(|_, o| o.end_s > now.0 || o.owes());
        }
        self.doubt.swap(0, Relaxed)
    }

    /// Hits answered on credit and not yet counted by the store.
    #[cfg(test)]
    pub(crate) fn owed(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().values().map(Owed::pending).sum::<u64>())
            .sum()
    }
}

#[cfg(test)]
#[path = "credit_tests.rs"]
mod tests;
