//! Requests in flight, in memory (`algorithm: concurrency`): per counter,
//! the slots held and when each lease ends. A slot is taken when its request
//! starts and given back when it ends; one never given back (Envoy crashed,
//! the stream-done call was lost) is dropped once its lease ends, so a slot
//! is never lost for longer than the lease.
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
use super::memory::SAMPLE;
use crate::limiter::Tally;

const SHARDS: usize = 16;

/// The slots of one counter: (hash of the slot's id, end of its lease in µs).
type Held = Vec<(u64, u64)>;

#[derive(Debug)]
pub(crate) struct Leases {
    shards: Box<[Mutex<HashMap<u64, Held>>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl Leases {
    pub(crate) fn new(capacity: usize) -> Leases {
        Leases {
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
                return Tally::Count(0);
            };
            held.retain(|(s, end)| *s != slot && *end > now);
            let left = held.len() as u64;
            if held.is_empty() {
                map.remove(&key);
            }
            return Tally::Count(left);
        }
        if map.len() >= self.per_shard && !map.contains_key(&key) {
            make_room(&mut map);
        }
        let held = map.entry(key).or_default();
        held.retain(|(_, end)| *end > now);
        let count = held.len() as u64;
        let end = now.saturating_add(inc.window.period.seconds().saturating_mul(1_000_000));
        if let Some(mine) = held.iter_mut().find(|(s, _)| *s == slot) {
            if inc.hits > 0 {
                mine.1 = end;
            }
            return Tally::Count(count);
        }
        if inc.hits == 0 {
            return Tally::Count(count);
        }
        if count < u64::from(inc.limit) {
            held.push((slot, end));
            return Tally::Count(count + 1);
        }
        Tally::Count(count + 1)
    }

    /// Drops ended leases, and counters with none left.
    pub(crate) fn sweep(&self, now_us: u64) {
        for shard in self.shards.iter() {
            shard.lock().retain(|_, held| {
                held.retain(|(_, end)| *end > now_us);
                !held.is_empty()
            });
        }
    }
}

/// Frees the counter whose last lease ends soonest, of a sample.
fn make_room(map: &mut HashMap<u64, Held>) {
    let soonest = map
        .iter()
        .take(SAMPLE)
        .map(|(k, held)| (*k, held.iter().map(|(_, end)| *end).max().unwrap_or(0)))
        .min_by_key(|(_, end)| *end)
        .map(|(k, _)| k);
    if let Some(k) = soonest {
        map.remove(&k);
    }
}
