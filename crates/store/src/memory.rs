//! The embedded store: sharded in-process counters for a single instance.
//!
//! A counter is 40 bytes in its table: a 128-bit keyed hash stands for the
//! key (one SipHash-1-3-128 run under a random key, so a client cannot aim two
//! descriptors at one counter), and window, limit and count take 24 bytes. A
//! million live keys cost well under 128 bytes each, table slack included.
//!
//! The table is bounded (`--max-counters`). The sweep frees ended windows
//! once a second; when a shard is full, one counter is dropped: of a sample
//! of [`SAMPLE`] taken in hash order (random per process, so no client can
//! aim it), an ended one if any, else the one furthest below its limit, with
//! the smallest count among those. A flood of new keys therefore evicts its own one-hit
//! counters; to push out a victim's counter of `c` hits an attacker must fill
//! the table with counters of more than `c` hits (capacity times `c` hits,
//! which the same limits count), and a counter at or over its limit is only
//! dropped when every sampled counter is.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use siphasher::sip128::{Hasher128, SipHasher13};

use parking_lot::Mutex;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::demand::{DemandTables, DemandUpdate, Fleet};
use super::slots::Slots;
use super::{Answer, BoxFuture, Increment, Occupancy, Store, StoreError, StoreHealth};
use crate::limiter::Now;
use crate::limiter::{Algorithm, Tally};
use apply::{apply, give_back};

mod apply;

const SHARDS: usize = 64;
use super::SAMPLE;
/// The default bound on live counters (`--max-counters`): about 100 MB.
pub const DEFAULT_MAX_COUNTERS: usize = 1_000_000;

#[derive(Debug)]
struct Slot {
    /// The window's first second; u32 holds Unix seconds until 2106.
    start: u32,
    /// The first second after the window: the slot is garbage from then on.
    end: u32,
    /// Windows: the limit the count is held against, to keep over-limit
    /// counters. Token bucket: the first second of the window `previous`
    /// counts in.
    limit: u32,
    /// Fixed window: the count. Sliding: this window's count. Token bucket:
    /// the theoretical arrival time, in microseconds since the epoch.
    count: u64,
    /// Sliding window: the previous window's count, saturating (any count
    /// past `u32::MAX` is over every limit). Token bucket: the tokens asked
    /// for in the window starting at `limit` (the usage the advisor reads),
    /// saturating. 4 bytes keep the slot at 24.
    previous: u32,
}

impl Slot {
    /// Whether the slot is garbage at `now`: its window (or a bucket's
    /// refill) has ended, so dropping it loses nothing.
    fn ended(&self, now: u32) -> bool {
        self.end <= now
    }

    /// Eviction order: the lowest goes first. Ended slots before live ones,
    /// counters within their limit before those at or over it, then by count
    /// (for a token bucket, by how long until it is full again).
    fn keep_score(&self, now: u32) -> (bool, bool, u64) {
        if self.ended(now) {
            return (false, false, 0);
        }
        if self.start == BUCKET {
            // How long until full: a full bucket kept only for its usage
            // goes first.
            let debt = (self.count / 1_000_000).saturating_sub(u64::from(now));
            return (true, false, debt);
        }
        (true, self.count >= u64::from(self.limit), self.count)
    }
}

/// The `start` of a token bucket's slot, which has no window.
const BUCKET: u32 = u32::MAX;

/// The table's keys are hashes already: use their bits as they are.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `Id`s are hashed here; keep any other input well mixed.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A counter's 128-bit keyed hash as two words: aligned to 8 rather than
/// a `u128`'s 16, so a table entry is 40 bytes, not 48.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Id(u64, u64);

impl std::hash::Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The low word is a hash already; the table takes it as it is.
        state.write_u64(self.1);
    }
}

type Shard = HashMap<Id, Slot, BuildHasherDefault<PreHashed>>;

/// Counters in memory. Each increment holds one shard's lock for a few
/// nanoseconds and never across an `.await`, so concurrent requests on one key
/// are counted exactly.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    /// The key of the counters' 128-bit hash, random per process.
    key: (u64, u64),
    per_shard: usize,
    evictions: AtomicU64,
    /// Live counters at the last sweep (the gauge; exact counting per
    /// insert would put a shared atomic on every request).
    live: AtomicU64,
    /// Quota mode's demand tables, bounded like the counters.
    pub(super) demand: DemandTables,
    /// Requests in flight (`algorithm: concurrency`), bounded like the counters.
    slots: Slots,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_capacity(DEFAULT_MAX_COUNTERS)
    }
}

/// Seconds since the epoch as stored; saturates rather than wraps.
fn secs(s: u64) -> u32 {
    u32::try_from(s).unwrap_or(u32::MAX)
}

impl MemoryStore {
    /// A store of at most about `max_counters` live counters (at least one
    /// per shard).
    pub fn with_capacity(max_counters: usize) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            // std's keys are random per process: a constant hashed under
            // them is a key no client can know.
            key: (
                RandomState::new().hash_one(0u8),
                RandomState::new().hash_one(1u8),
            ),
            per_shard: max_counters.div_ceil(SHARDS).max(1),
            evictions: AtomicU64::new(0),
            live: AtomicU64::new(0),
            demand: DemandTables::new(max_counters),
            slots: Slots::new(max_counters),
        }
    }

    /// Live counters (as of the last sweep) and evictions so far.
    pub fn stats(&self) -> Occupancy {
        Occupancy {
            live: self.live.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
        }
    }

    /// Makes room for one more counter in a full shard, in O(1): the sample's
    /// lowest-scoring slot goes (the sweep frees the other ended ones once a
    /// second). A full scan here would let a flood of new keys make every one
    /// of its requests walk the whole shard under its lock.
    fn make_room(&self, map: &mut Shard, now: u32) {
        let victim = map
            .iter()
            .take(SAMPLE)
            .min_by_key(|(_, slot)| slot.keep_score(now))
            .map(|(id, slot)| (*id, slot.ended(now)));
        if let Some((id, ended)) = victim {
            map.remove(&id);
            if !ended {
                self.evictions.fetch_add(1, Relaxed);
            }
        }
    }

    /// Adds to every counter of the batch, synchronously, each at its
    /// request's clock reading (token buckets refill by it; windows come
    /// with the increments).
    pub fn count<'a>(&self, batch: impl IntoIterator<Item = &'a Increment>) -> Vec<Tally> {
        batch
            .into_iter()
            .map(|inc| {
                let now_us = inc.at_us;
                if inc.algorithm == Algorithm::Concurrency {
                    return self.slots.hold(inc);
                }
                let (shard, id) = self.locate(inc);
                let mut map = shard.lock();
                if inc.refund {
                    // A counter that is not there is not made by a refund.
                    return map
                        .get_mut(&id)
                        .map_or(Tally::empty(inc.algorithm), |slot| {
                            give_back(slot, inc, now_us)
                        });
                }
                if map.len() >= self.per_shard && !map.contains_key(&id) {
                    self.make_room(&mut map, secs(inc.window.start.0));
                }
                let slot = map.entry(id).or_insert(Slot {
                    start: 0,
                    end: 0,
                    limit: inc.limit,
                    count: 0,
                    previous: 0,
                });
                apply(slot, inc, now_us)
            })
            .collect()
    }

    /// The shard and id of `inc`'s counter.
    fn locate(&self, inc: &Increment) -> (&Mutex<Shard>, Id) {
        // One 128-bit run: half the cost of two 64-bit ones, the same bits.
        let mut h = SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write(inc.key.as_bytes());
        let hash = h.finish128();
        let id = Id(hash.h1, hash.h2);
        #[allow(clippy::indexing_slicing, reason = "taken modulo the shard count")]
        (&self.shards[hash.h1 as usize % SHARDS], id)
    }

    /// Empties the counters of `batch` (a sliding window keeps both of its
    /// windows in one slot, so both go).
    pub fn reset<'a>(&self, batch: impl IntoIterator<Item = &'a Increment>) {
        for inc in batch {
            if inc.algorithm == Algorithm::Concurrency {
                self.slots.clear(inc);
                continue;
            }
            let (shard, id) = self.locate(inc);
            shard.lock().remove(&id);
        }
    }

    /// Frees every counter whose window has ended; returns how many remain.
    pub fn sweep(&self, now: Now) -> usize {
        self.slots.sweep(now.0.saturating_mul(1_000_000));
        let live = self
            .shards
            .iter()
            .map(|shard| {
                let mut map = shard.lock();
                map.retain(|_, slot| u64::from(slot.end) > now.0);
                map.len()
            })
            .sum();
        self.live.store(live as u64, Relaxed);
        live
    }

    /// How many counters are held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MemoryStore {
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        let counts = self.count(batch.iter());
        Box::pin(std::future::ready(Ok(counts)))
    }

    fn waits(&self) -> bool {
        false
    }

    fn answer<'a>(&'a self, batch: &'a [Increment], _: Option<tokio::time::Instant>) -> Answer<'a> {
        Answer::Now(Ok(self.count(batch.iter())))
    }

    fn reset<'a>(&'a self, batch: &'a [Increment]) -> BoxFuture<'a, Result<(), StoreError>> {
        MemoryStore::reset(self, batch);
        Box::pin(std::future::ready(Ok(())))
    }

    fn health(&self) -> StoreHealth {
        StoreHealth {
            backend: "memory",
            in_use: "memory",
            healthy: true,
            reached: true,
            detail: None,
        }
    }

    fn sweep(&self, now: Now) {
        MemoryStore::sweep(self, now);
    }

    fn demand<'a>(&'a self, update: &'a DemandUpdate) -> BoxFuture<'a, Fleet> {
        // Only a table that is full refuses; nothing shared can be down here.
        let fleet = match self.demand.update(update) {
            Ok(members) => Fleet::Members(members),
            Err(_) => Fleet::Allow,
        };
        Box::pin(std::future::ready(fleet))
    }

    fn counters(&self) -> Occupancy {
        self.stats()
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
