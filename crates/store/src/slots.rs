//! Requests in flight, in memory (`algorithm: concurrency`): per counter,
//! the slots held and when each lease ends. A slot is taken when its request
//! starts and given back when it ends; one never given back (Envoy crashed,
//! the stream-done call was lost) is dropped once its lease ends, so a slot
//! is never lost for longer than the lease.
//!
//! Each counter also keeps the most slots its key held at once in the
//! current window (the usage the advisor reads): a take reports the peak
//! before it, so each level of each key is crossed once per window.
//!
//! Bounded like the counters: at most `capacity` counters in all, and a
//! counter holds at most its limit of slots (one past it is refused, not
//! kept). When full, the counter whose last lease ends soonest among a few
//! makes room, in O(1): a full scan would let a flood of new keys walk the
//! whole shard under its lock with every request.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;

use super::Increment;
use super::SAMPLE;
use crate::limiter::Tally;

const SHARDS: usize = 16;

/// The slots of one counter, and its peak in a window.
#[derive(Debug, Default)]
struct Held {
    /// (hash of the slot's id, end of its lease in µs).
    slots: Vec<(u64, u64)>,
    /// The end of the window `peak` belongs to (Unix seconds): the
    /// counter is kept until then even with no slot held, so a key that
    /// takes a slot again in the window does not count as a new peak.
    window_end: u64,
    /// The most slots held at once in `window` (one past the limit for a
    /// take that found none free).
    peak: u64,
}

impl Held {
    /// Raises the window's peak to `held`; returns the peak before.
    fn raise(&mut self, window_end: u64, held: u64) -> u64 {
        if self.window_end != window_end {
            (self.window_end, self.peak) = (window_end, 0);
        }
        let before = self.peak;
        self.peak = before.max(held);
        before
    }
}

/// What a look or a release reports: slots held, no peak.
fn slots(held: u64) -> Tally {
    Tally::Slots { held, peak: None }
}

#[derive(Debug)]
pub(crate) struct Slots {
    shards: Box<[Mutex<HashMap<u64, Held>>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl Slots {
    pub(crate) fn new(capacity: usize) -> Slots {
        Slots {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    /// Releases every slot of `inc`'s counter.
    pub(crate) fn clear(&self, inc: &Increment) {
        let key = self.hasher.hash_one(inc.key.as_bytes());
        #[allow(clippy::indexing_slicing, reason = "taken modulo the shard count")]
        self.shards[key as usize % SHARDS].lock().remove(&key);
    }

    /// Takes a slot for `inc`'s request (or renews the one it holds), gives
    /// it back (`refund`), or only looks (`hits` 0). Reports the slots held
    /// after, or one past the limit when none was free.
    pub(crate) fn hold(&self, inc: &Increment) -> Tally {
        let key = self.hasher.hash_one(inc.key.as_bytes());
        let slot = self
            .hasher
            .hash_one(inc.slot.as_deref().unwrap_or_default());
        let now = inc.at_us;
        #[allow(clippy::indexing_slicing, reason = "taken modulo the shard count")]
        let mut map = self.shards[key as usize % SHARDS].lock();
        if inc.refund {
            let Some(held) = map.get_mut(&key) else {
                // Unknown or expired: nothing to give back.
                return slots(0);
            };
            held.slots.retain(|(s, end)| *s != slot && *end > now);
            let left = held.slots.len() as u64;
            if held.slots.is_empty() && held.window_end <= now / 1_000_000 {
                map.remove(&key);
            }
            return slots(left);
        }
        if map.len() >= self.per_shard && !map.contains_key(&key) {
            make_room(&mut map);
        }
        let held = map.entry(key).or_default();
        held.slots.retain(|(_, end)| *end > now);
        let count = held.slots.len() as u64;
        let end = now.saturating_add(inc.window.period.seconds().saturating_mul(1_000_000));
        if let Some(mine) = held.slots.iter_mut().find(|(s, _)| *s == slot) {
            if inc.hits > 0 {
                mine.1 = end;
            }
            return slots(count);
        }
        if inc.hits == 0 {
            return slots(count);
        }
        if count < u64::from(inc.limit) {
            held.slots.push((slot, end));
        }
        let peak = Some(held.raise(inc.window.end(), count + 1));
        Tally::Slots {
            held: count + 1,
            peak,
        }
    }

    /// Drops ended leases, and counters with none left whose window is over.
    pub(crate) fn sweep(&self, now_us: u64) {
        for shard in self.shards.iter() {
            shard.lock().retain(|_, held| {
                held.slots.retain(|(_, end)| *end > now_us);
                !held.slots.is_empty() || held.window_end > now_us / 1_000_000
            });
        }
    }
}

/// Frees the counter whose last lease ends soonest, of a sample.
fn make_room(map: &mut HashMap<u64, Held>) {
    let soonest = map
        .iter()
        .take(SAMPLE)
        .map(|(k, held)| {
            let last = held.slots.iter().map(|(_, end)| *end).max().unwrap_or(0);
            (*k, last)
        })
        .min_by_key(|(_, end)| *end)
        .map(|(k, _)| k);
    if let Some(k) = soonest {
        map.remove(&k);
    }
}
