//! The embedded store: sharded in-process counters for a single instance.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;

use super::{BoxFuture, CounterKey, Increment, Store, StoreError, StoreHealth};
use crate::limiter::{Now, WindowStart};

const SHARDS: usize = 64;

#[derive(Debug)]
struct Slot {
    start: WindowStart,
    /// The first second after the window: the slot is garbage from then on.
    end: u64,
    count: u64,
}

/// Counters in memory. Each increment holds one shard's lock for a few
/// nanoseconds and never across an `.await`, so concurrent requests on one key
/// are counted exactly.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<HashMap<CounterKey, Slot>>]>,
    hasher: RandomState,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl MemoryStore {
    /// Adds to every counter of the batch, synchronously.
    pub fn increment_now<'a>(&self, batch: impl IntoIterator<Item = &'a Increment>) -> Vec<u64> {
        batch
            .into_iter()
            .map(|inc| {
                let shard = &self.shards[self.hasher.hash_one(&inc.key) as usize % SHARDS];
                let mut map = shard.lock();
                let slot = map.entry(inc.key.clone()).or_insert(Slot {
                    start: inc.window.start,
                    end: inc.window.end(),
                    count: 0,
                });
                if slot.start != inc.window.start {
                    *slot = Slot {
                        start: inc.window.start,
                        end: inc.window.end(),
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
                map.retain(|_, slot| slot.end > now.0);
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
