//! The embedded store: sharded in-process counters for a single instance.
//!
//! A counter is 32 bytes in its table: a 128-bit keyed hash stands for the
//! key (two SipHash runs under random keys, so a client cannot aim two
//! descriptors at one counter), and window and count take 16 bytes. A million
//! live keys cost well under 128 bytes each, table slack included.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use parking_lot::Mutex;

use super::{BoxFuture, Increment, Store, StoreError, StoreHealth};
use crate::limiter::Now;

const SHARDS: usize = 64;

#[derive(Debug)]
struct Slot {
    /// The window's first second; u32 holds Unix seconds until 2106.
    start: u32,
    /// The first second after the window: the slot is garbage from then on.
    end: u32,
    count: u64,
}

/// The table's keys are hashes already: use their bits as they are.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u128 keys are hashed here; keep any other input well mixed.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Shard = HashMap<u128, Slot, BuildHasherDefault<PreHashed>>;

/// Counters in memory. Each increment holds one shard's lock for a few
/// nanoseconds and never across an `.await`, so concurrent requests on one key
/// are counted exactly.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hashers: [RandomState; 2],
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hashers: [RandomState::new(), RandomState::new()],
        }
    }
}

/// Seconds since the epoch as stored; saturates rather than wraps.
fn secs(s: u64) -> u32 {
    u32::try_from(s).unwrap_or(u32::MAX)
}

impl MemoryStore {
    /// Adds to every counter of the batch, synchronously.
    pub fn increment_now<'a>(&self, batch: impl IntoIterator<Item = &'a Increment>) -> Vec<u64> {
        batch
            .into_iter()
            .map(|inc| {
                let bytes = inc.key.as_bytes();
                let high = self.hashers[0].hash_one(bytes);
                let id = u128::from(high) << 64 | u128::from(self.hashers[1].hash_one(bytes));
                #[allow(clippy::indexing_slicing, reason = "taken modulo the shard count")]
                let shard = &self.shards[high as usize % SHARDS];
                let (start, end) = (secs(inc.window.start.0), secs(inc.window.end()));
                let mut map = shard.lock();
                let slot = map.entry(id).or_insert(Slot {
                    start,
                    end,
                    count: 0,
                });
                if slot.start != start {
                    *slot = Slot {
                        start,
                        end,
                        count: 0,
                    };
                }
                slot.count = slot.count.saturating_add(inc.hits);
                slot.count
            })
            .collect()
    }

    /// Frees every counter whose window has ended; returns how many remain.
    pub fn sweep(&self, now: Now) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let mut map = shard.lock();
                map.retain(|_, slot| u64::from(slot.end) > now.0);
                map.len()
            })
            .sum()
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
    ) -> BoxFuture<'a, Result<Vec<u64>, StoreError>> {
        let counts = self.increment_now(batch.iter());
        Box::pin(std::future::ready(Ok(counts)))
    }

    fn health(&self) -> StoreHealth {
        StoreHealth {
            backend: "memory",
            in_use: "memory",
            healthy: true,
            detail: None,
        }
    }

    fn sweep(&self, now: Now) {
        MemoryStore::sweep(self, now);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::limiter::{Unit, Window};
    use crate::store::CounterKey;

    fn inc(v: &str, now: u64) -> Increment {
        Increment {
            key: CounterKey::new("d", Unit::Minute, [("k", v)]),
            hits: 1,
            limit: 100,
            window: Window::containing(Unit::Minute, Now(now)),
        }
    }

    #[test]
    fn counts_per_key_and_restarts_each_window() {
        let s = MemoryStore::default();
        assert_eq!(
            s.increment_now(&[inc("a", 60), inc("a", 61), inc("b", 61)]),
            [1, 2, 1]
        );
        assert_eq!(s.increment_now(&[inc("a", 120)]), [1]);
    }

    #[test]
    fn sweep_frees_ended_windows() {
        let s = MemoryStore::default();
        s.increment_now(&[inc("a", 60), inc("b", 60)]);
        assert_eq!(s.sweep(Now(119)), 2);
        assert_eq!(s.sweep(Now(120)), 0);
        assert!(s.is_empty());
    }

    #[test]
    fn exact_under_concurrency() {
        let s = Arc::new(MemoryStore::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| s.increment_now(&[inc("hot", 60)])[0] <= 100)
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(admitted, 100);
    }
}
