//! The embedded store: sharded in-process counters for a single instance.
//!
//! A counter is 40 bytes in its table: a 128-bit keyed hash stands for the
//! key (two SipHash runs under random keys, so a client cannot aim two
//! descriptors at one counter), and window, limit and count take 24 bytes. A
//! million live keys cost well under 128 bytes each, table slack included.
//!
//! The table is bounded (`--max-counters`). When a shard is full, counters
//! whose window has ended go first; failing that, one counter is dropped: of
//! a sample of [`SAMPLE`] taken in hash order (random per process, so no
//! client can aim it), the one furthest below its limit, with the smallest
//! count among those. A flood of new keys therefore evicts its own one-hit
//! counters; to push out a victim's counter of `c` hits an attacker must fill
//! the table with counters of more than `c` hits (capacity times `c` hits,
//! which the same limits count), and a counter at or over its limit is only
//! dropped when every sampled counter is.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use parking_lot::Mutex;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{BoxFuture, CounterStats, Increment, Store, StoreError, StoreHealth};
use crate::limiter::Now;
use crate::limiter::{Algorithm, Refill, Tally};

const SHARDS: usize = 64;
/// Counters looked at to choose one to drop when a shard is full.
pub const SAMPLE: usize = 16;
/// The default bound on live counters (`--max-counters`): about 100 MB.
pub const DEFAULT_MAX_COUNTERS: usize = 1_000_000;

#[derive(Debug)]
struct Slot {
    /// The window's first second; u32 holds Unix seconds until 2106.
    start: u32,
    /// The first second after the window: the slot is garbage from then on.
    end: u32,
    /// The limit the count is held against, to keep over-limit counters.
    limit: u32,
    /// Fixed window: the count. Sliding: this window's count. Token bucket:
    /// the theoretical arrival time, in microseconds since the epoch.
    count: u64,
    /// Sliding window: the previous window's count, saturating (any count
    /// past `u32::MAX` is over every limit); 4 bytes keep the slot at 24.
    previous: u32,
}

impl Slot {
    /// Eviction order: the lowest goes first. Counters within their limit
    /// before those at or over it, then by count (for a token bucket, by how
    /// long until it is full again).
    fn keep_score(&self, now: u32) -> (bool, u64) {
        if self.start == BUCKET {
            let debt = u64::from(self.end.saturating_sub(now));
            return (false, debt);
        }
        (self.count >= u64::from(self.limit), self.count)
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
    hashers: [RandomState; 2],
    per_shard: usize,
    evictions: AtomicU64,
    /// Live counters at the last sweep (the gauge; exact counting per
    /// insert would put a shared atomic on every request).
    live: AtomicU64,
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
            hashers: [RandomState::new(), RandomState::new()],
            per_shard: max_counters.div_ceil(SHARDS).max(1),
            evictions: AtomicU64::new(0),
            live: AtomicU64::new(0),
        }
    }

    /// Live counters (as of the last sweep) and evictions so far.
    pub fn stats(&self) -> CounterStats {
        CounterStats {
            live: self.live.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
        }
    }

    /// Makes room for one more counter in a full shard.
    fn make_room(&self, map: &mut Shard, now: u32) {
        map.retain(|_, slot| slot.end > now);
        if map.len() < self.per_shard {
            return;
        }
        let victim = map
            .iter()
            .take(SAMPLE)
            .min_by_key(|(_, slot)| slot.keep_score(now))
            .map(|(id, _)| *id);
        if let Some(id) = victim {
            map.remove(&id);
            self.evictions.fetch_add(1, Relaxed);
        }
    }

    /// Adds to every counter of the batch, synchronously, at the wall clock.
    pub fn increment_now<'a>(&self, batch: impl IntoIterator<Item = &'a Increment>) -> Vec<Tally> {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        self.increment_at(batch, now_us)
    }

    /// Adds to every counter of the batch at `now_us` (token buckets refill
    /// by it; windows come with the increments).
    pub fn increment_at<'a>(
        &self,
        batch: impl IntoIterator<Item = &'a Increment>,
        now_us: u64,
    ) -> Vec<Tally> {
        batch
            .into_iter()
            .map(|inc| {
                let bytes = inc.key.as_bytes();
                let high = self.hashers[0].hash_one(bytes);
                let id = Id(high, self.hashers[1].hash_one(bytes));
                #[allow(clippy::indexing_slicing, reason = "taken modulo the shard count")]
                let shard = &self.shards[high as usize % SHARDS];
                let mut map = shard.lock();
                if map.len() >= self.per_shard && !map.contains_key(&id) {
                    // The whole scan runs only when a shard is full, and
                    // then frees every ended window at once.
                    self.make_room(&mut map, secs(inc.window.start.0));
                }
                let slot = map.entry(id).or_insert(Slot {
                    start: 0,
                    end: 0,
                    limit: inc.limit,
                    count: 0,
                    previous: 0,
                });
                slot.limit = inc.limit;
                apply(slot, inc, now_us)
            })
            .collect()
    }

    /// Frees every counter whose window has ended; returns how many remain.
    pub fn sweep(&self, now: Now) -> usize {
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

/// One increment on its slot, by the rule's algorithm.
fn apply(slot: &mut Slot, inc: &Increment, now_us: u64) -> Tally {
    let (start, end) = (secs(inc.window.start.0), secs(inc.window.end()));
    match inc.algorithm {
        Algorithm::FixedWindow => {
            if slot.start != start {
                (slot.start, slot.end, slot.count) = (start, end, 0);
            }
            slot.count = slot.count.saturating_add(inc.hits);
            Tally::Count(slot.count)
        }
        Algorithm::SlidingWindow => {
            if slot.start != start {
                let previous = secs(inc.window.previous().start.0);
                slot.previous = if slot.start == previous {
                    u32::try_from(slot.count).unwrap_or(u32::MAX)
                } else {
                    0
                };
                slot.count = 0;
                slot.start = start;
                // Kept through the next window, which weighs this one.
                slot.end = secs(inc.window.end() + inc.window.period.seconds());
            }
            slot.count = slot.count.saturating_add(inc.hits);
            Tally::Sliding {
                current: slot.count,
                previous: u64::from(slot.previous),
            }
        }
        Algorithm::TokenBucket { burst } => {
            let refill = Refill::new(inc.limit, inc.window.period.seconds(), burst);
            let tat = if slot.start == BUCKET { slot.count } else { 0 };
            let (tat, tally) = refill.take(tat, now_us, inc.hits);
            slot.start = BUCKET;
            slot.count = tat;
            // Full again (and so the same as no slot) from then on.
            slot.end = secs(tat.div_ceil(1_000_000));
            tally
        }
    }
}

impl Store for MemoryStore {
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
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

    fn counters(&self) -> CounterStats {
        self.stats()
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
            algorithm: Algorithm::FixedWindow,
            on_failure: None,
        }
    }

    fn counts(t: Vec<Tally>) -> Vec<u64> {
        t.into_iter()
            .map(|t| match t {
                Tally::Count(n) => n,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn bounded_and_a_flood_of_new_keys_does_not_reset_a_busy_counter() {
        let s = MemoryStore::with_capacity(SHARDS * 8);
        // A client that spent 30 of its 100 hits, then a flood of one-hit keys.
        for _ in 0..30 {
            s.increment_now(&[inc("victim", 60)]);
        }
        for i in 0..100_000 {
            s.increment_now(&[inc(&format!("flood{i}"), 60)]);
        }
        assert!(s.sweep(Now(60)) <= SHARDS * 8);
        assert!(s.stats().evictions >= 100_000 - (SHARDS * 8) as u64);
        assert_eq!(counts(s.increment_now(&[inc("victim", 61)])), [31], "kept");
    }

    #[test]
    fn over_limit_counters_outlive_busy_ones_when_full() {
        let s = MemoryStore::with_capacity(SHARDS * 8);
        let over = |v: &str| Increment {
            limit: 3,
            ..inc(v, 60)
        };
        for _ in 0..5 {
            s.increment_now(&[over("blocked")]);
        }
        // Every other counter has more hits, but none is over its limit.
        for i in 0..2_000 {
            for _ in 0..10 {
                s.increment_now(&[inc(&format!("busy{i}"), 60)]);
            }
        }
        assert_eq!(counts(s.increment_now(&[over("blocked")])), [6]);
    }

    #[test]
    fn ended_windows_make_room_before_anything_live_goes() {
        let s = MemoryStore::with_capacity(SHARDS);
        for i in 0..500 {
            s.increment_now(&[inc(&format!("old{i}"), 60)]);
        }
        let before = s.stats().evictions;
        for _ in 0..3 {
            s.increment_now(&[inc("new", 120)]);
        }
        assert_eq!(counts(s.increment_now(&[inc("new", 121)])), [4]);
        assert_eq!(s.stats().evictions, before, "an ended window went instead");
    }

    #[test]
    fn counts_per_key_and_restarts_each_window() {
        let s = MemoryStore::default();
        assert_eq!(
            counts(s.increment_now(&[inc("a", 60), inc("a", 61), inc("b", 61)])),
            [1, 2, 1]
        );
        assert_eq!(counts(s.increment_now(&[inc("a", 120)])), [1]);
    }

    fn shaped(v: &str, algorithm: Algorithm, now: u64) -> Increment {
        let period = crate::limiter::Period::Seconds(10);
        Increment {
            key: CounterKey::new(
                "d",
                crate::store::KeySpace { period, algorithm },
                [("k", v)],
            ),
            hits: 1,
            limit: 5,
            window: Window::containing(period, Now(now)),
            algorithm,
            on_failure: None,
        }
    }

    #[test]
    fn a_sliding_window_carries_the_previous_window_once() {
        let s = MemoryStore::default();
        let at = |now| shaped("a", Algorithm::SlidingWindow, now);
        for _ in 0..3 {
            s.increment_at(&[at(100)], 0);
        }
        assert_eq!(
            s.increment_at(&[at(111)], 0),
            [Tally::Sliding {
                current: 1,
                previous: 3
            }]
        );
        // Two windows on, nothing carries.
        assert_eq!(
            s.increment_at(&[at(135)], 0),
            [Tally::Sliding {
                current: 1,
                previous: 0
            }]
        );
        // Kept through the next window, then swept.
        assert_eq!(s.sweep(Now(145)), 1);
        assert_eq!(s.sweep(Now(150)), 0);
    }

    #[test]
    fn a_token_bucket_is_exact_and_refills() {
        let s = MemoryStore::default();
        let b = shaped("b", Algorithm::TokenBucket { burst: 5 }, 100);
        let t0 = 100_000_000;
        let taken = (0..20)
            .filter(|_| {
                matches!(
                    s.increment_at(std::slice::from_ref(&b), t0)[0],
                    Tally::Bucket { taken: true, .. }
                )
            })
            .count();
        assert_eq!(taken, 5, "burst 5, nothing refilled yet");
        // 5 per 10 s: one token every 2 s.
        assert!(matches!(
            s.increment_at(std::slice::from_ref(&b), t0 + 1_999_999)[0],
            Tally::Bucket { taken: false, .. }
        ));
        assert!(matches!(
            s.increment_at(std::slice::from_ref(&b), t0 + 2_000_000)[0],
            Tally::Bucket { taken: true, .. }
        ));
        // A full bucket is the same as none: swept once full.
        assert_eq!(s.sweep(Now(113)), 0);
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
                        .filter(|_| counts(s.increment_now(&[inc("hot", 60)]))[0] <= 100)
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(admitted, 100);
    }
}

/// The sliding window's worst case, measured on the memory store with a
/// simulated clock: a whole budget in the last instant of one window, then a
/// client that tries every 10 ms but, once refused, waits its Retry-After
/// (refused requests count, so a client that keeps hammering never gets in).
#[cfg(test)]
mod sliding_worst_case {
    use super::*;
    use crate::limiter::{Counted, Period, Unit, Window, status};
    use crate::store::{CounterKey, KeySpace};

    #[test]
    fn over_any_span_it_admits_at_most_limit_times_one_plus_span_over_window() {
        let (limit, window_ms) = (100u32, 60_000u64);
        let s = MemoryStore::default();
        let space = KeySpace {
            period: Period::Unit(Unit::Minute),
            algorithm: Algorithm::SlidingWindow,
        };
        let key = CounterKey::new("d", space, [("k", "v")]);
        let mut admitted_at = Vec::new();
        let mut quiet_until = 0;
        // From 59.99 s: the burst; then every 10 ms for two windows.
        let start_ms = 60_000 * 1_000 - 10;
        for step in 0..12_000u64 {
            let now_ms = start_ms + step * 10;
            let now = Now(now_ms / 1000);
            let window = Window::containing(Period::Unit(Unit::Minute), now);
            let tries = if step == 0 { 100 } else { 1 };
            if now_ms < quiet_until {
                continue;
            }
            for _ in 0..tries {
                let inc = Increment {
                    key: key.clone(),
                    hits: 1,
                    limit,
                    window,
                    algorithm: Algorithm::SlidingWindow,
                    on_failure: None,
                };
                let tally = s.increment_at(std::slice::from_ref(&inc), 0)[0];
                let st = status(
                    &Counted {
                        requests_per_unit: limit,
                        window,
                        algorithm: Algorithm::SlidingWindow,
                        hits: 1,
                        tally,
                        elapsed_ms: now_ms - window.start.0 * 1000,
                        shadow: false,
                        quota: false,
                    },
                    now,
                );
                if st.over {
                    quiet_until = now_ms + st.retry_seconds * 1000;
                } else {
                    admitted_at.push(now_ms);
                }
            }
        }
        // The worst span of one window, and of a tenth of one.
        let most_in = |span: u64| {
            admitted_at
                .iter()
                .map(|t| {
                    admitted_at
                        .iter()
                        .filter(|u| **u >= *t && **u < t + span)
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        let whole = most_in(window_ms);
        let tenth = most_in(window_ms / 10);
        eprintln!("sliding window of 100/min, worst case: {whole} in 60 s, {tenth} in 6 s");
        assert!(whole <= 200, "{whole}");
        assert!(whole > 150, "the worst case is real: {whole}");
        assert!(tenth <= 110 + 1, "{tenth}");
    }
}
