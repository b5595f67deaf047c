//! The local over-limit cache: once a counter is known to be past its limit in
//! a window, requests on it are answered from memory until the window ends,
//! so a flood from one client costs Redis nothing after the limit is reached.
//!
//! A refusal is trusted for half a second ([`TRUST_US`]) from the request that recorded it, then
//! the store is asked again (and the answer remembered anew): a counter reset
//! or given back through another instance sharing the store is seen here
//! within that, on every rule, for one store call per flooded counter per
//! half second. The instance that resets or refunds forgets at once.
//!
//! A shadow-mode rule's counter is answered here too (a bot flooding it
//! would otherwise reach the store with every request), but its demand is
//! its usage: each hit answered here is kept as pending, and the safety
//! net's background counts them in the store a quarter second later, in one
//! increment per counter ([`OverLimitCache::due`]), so the store's count stays
//! the fleet's whole demand.
//!
//! It remembers the count seen, not a verdict: a request is answered locally
//! only when that count plus its hits exceeds *its* limit, so a per-request
//! `limit` override that allows more still goes to Redis (the reference's
//! freecache keeps blocking in that case, envoyproxy/ratelimit#1077).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;

use super::{CounterKey, Increment};
use crate::limiter::{Algorithm, Now, Tally, WindowStart, clock};

const SHARDS: usize = 16;

/// How long a remembered refusal is trusted, in µs (half a second): the
/// bound on how long another instance's reset or refund can go unseen here.
const TRUST_US: u64 = 500_000;

#[derive(Debug, Clone)]
struct Seen {
    start: WindowStart,
    end: u64,
    count: u64,
    /// The clock reading of the request whose answer this is, in µs.
    at_us: u64,
    /// A shadow-mode counter's hits answered here and not yet counted by
    /// the store, and the last increment answered (what to count them as).
    pending: u64,
    shadow: Option<Box<Increment>>,
}

/// A bounded map of counters known to be over their limit.
#[derive(Debug)]
pub struct OverLimitCache {
    shards: Box<[Mutex<HashMap<CounterKey, Seen>>]>,
    per_shard: usize,
    hasher: RandomState,
    /// Set when a shadow-mode hit is kept: [`OverLimitCache::due`] walks
    /// the shards only then, so a cache without shadow rules costs nothing.
    pending: std::sync::atomic::AtomicBool,
}

impl OverLimitCache {
    /// A cache of at most `capacity` counters; 0 disables it.
    pub fn new(capacity: usize) -> OverLimitCache {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: RandomState::new(),
            pending: std::sync::atomic::AtomicBool::new(false),
        }
    }

    #[allow(
        clippy::indexing_slicing,
        reason = "the index is taken modulo the shard count"
    )]
    fn shard(&self, key: &CounterKey) -> &Mutex<HashMap<CounterKey, Seen>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// The count to answer with when `inc` is certainly over its limit.
    /// Fixed windows only: a sliding window's estimate falls as time passes,
    /// and a token bucket refills within the window, so remembering either
    /// would turn a short wait into a whole-window block. A shadow-mode
    /// counter's hits answered here are added to its count and kept as
    /// pending for the store.
    pub fn over(&self, inc: &Increment) -> Option<Tally> {
        if self.per_shard == 0
            || inc.algorithm != Algorithm::FixedWindow
            || !inc.cacheable
            || inc.refund
        {
            return None;
        }
        let mut map = self.shard(&inc.key).lock();
        let seen = map.get_mut(&inc.key)?;
        let after = seen.count.saturating_add(inc.hits);
        let trusted = inc.at_us < seen.at_us.saturating_add(TRUST_US);
        // Not in the window's last moment: this instance's clock may be
        // that far behind the store's, whose next window has begun.
        let inside =
            inc.at_us.saturating_add(clock::guard_us()) < seen.end.saturating_mul(1_000_000);
        if !(trusted && inside && seen.start == inc.window.start && after > u64::from(inc.limit)) {
            return None;
        }
        if inc.late.is_some() {
            seen.count = after;
            seen.pending = seen.pending.saturating_add(inc.hits);
            if !self.pending.load(Relaxed) {
                self.pending.store(true, Relaxed);
            }
            match &mut seen.shadow {
                Some(last) => last.at_us = inc.at_us,
                None => seen.shadow = Some(Box::new(inc.clone())),
            }
        }
        Some(Tally::Remembered(after))
    }

    /// The shadow-mode hits answered here and not yet counted, handed over
    /// (once) as one increment per counter, for the store to count.
    pub fn due(&self) -> Vec<Increment> {
        let mut due = Vec::new();
        if self.per_shard == 0 || !self.pending.swap(false, Relaxed) {
            return due;
        }
        for shard in self.shards.iter() {
            for seen in shard.lock().values_mut().filter(|s| s.pending > 0) {
                if let Some(last) = &seen.shadow {
                    due.push(Increment {
                        hits: std::mem::take(&mut seen.pending),
                        ..(**last).clone()
                    });
                }
            }
        }
        due
    }

    /// Remembers a count the store returned, when it is over the limit.
    pub fn record(&self, inc: &Increment, tally: &Tally) {
        let Tally::Count(count) = *tally else {
            return;
        };
        if self.per_shard == 0 || count <= u64::from(inc.limit) || !inc.cacheable {
            return;
        }
        let mut map = self.shard(&inc.key).lock();
        if map.len() >= self.per_shard && !map.contains_key(&inc.key) {
            // Full: drop one entry, found in O(1). Forgetting a counter only
            // sends its next request to the store, which still counts it;
            // the sweep frees ended windows once a second.
            if let Some(old) = map.keys().next().cloned() {
                map.remove(&old);
            }
        }
        // Hits answered here and not yet counted are not in this count.
        let (pending, shadow) = match map.remove(&inc.key) {
            Some(s) if s.start == inc.window.start => (s.pending, s.shadow),
            _ => (0, None),
        };
        map.insert(
            inc.key.clone(),
            Seen {
                start: inc.window.start,
                end: inc.window.end(),
                count: count.saturating_add(pending),
                at_us: inc.at_us,
                pending,
                shadow,
            },
        );
    }

    /// Forgets a counter (a refund or a reset brought it down).
    pub fn forget(&self, key: &CounterKey) {
        if self.per_shard > 0 {
            self.shard(key).lock().remove(key);
        }
    }

    /// Frees entries whose window has ended.
    pub fn sweep(&self, now: Now) {
        for shard in self.shards.iter() {
            shard.lock().retain(|_, s| s.end > now.0);
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
