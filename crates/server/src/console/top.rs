//! The descriptors with the most over-limit answers lately, for the console:
//! a space-saving sketch (Metwally et al.) of a fixed number of slots, so a
//! flood of distinct keys costs the same memory as one key.
//!
//! Two generations rotate every [`ROTATE_SECONDS`]: the top is the current
//! one merged with the previous one, that is the last 30 to 60 seconds. The
//! request path only reaches it for a descriptor that is over its limit, and
//! never waits: when another request holds the sketch, the sample is dropped
//! (counted), which keeps the heavy hitters on top all the same.
//!
//! Keys are shown under the privacy policy of metrics and logs: email values
//! arrive already hashed, and a value that reads as an IP address (or an
//! address with a prefix length, as `masked_remote_address`) is masked to its
//! first half unless the operator opted in (`--console-show-addresses`), with
//! a short keyed tag so distinct clients stay distinct.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use crate::key::CounterKey;

/// Seconds a generation of the sketch counts before it becomes the previous one.
pub const ROTATE_SECONDS: u64 = 30;
/// Seconds the top looks back at most: two generations.
pub const WINDOW_SECONDS: u64 = 2 * ROTATE_SECONDS;
/// Bytes of one key as shown; longer ones are cut.
pub const MAX_TEXT: usize = 256;

#[derive(Debug)]
struct Slot {
    hash: u64,
    count: u64,
    text: Box<str>,
    /// The key in clear, for an authorised operator (`/api/counters/top`).
    clear: Clear,
}

/// A key of the top in clear: its domain, rule and entries as counted
/// (email values hashed), each value cut to [`MAX_TEXT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clear {
    pub domain: Box<str>,
    pub rule: Box<str>,
    pub entries: Box<[(Box<str>, Box<str>)]>,
}

#[derive(Debug, Default)]
struct Sketch {
    slots: Vec<Slot>,
    index: HashMap<u64, usize>,
}

impl Sketch {
    fn add(
        &mut self,
        capacity: usize,
        hash: u64,
        hits: u64,
        text: impl FnOnce() -> (Box<str>, Clear),
    ) {
        if let Some(slot) = self.index.get(&hash).and_then(|&i| self.slots.get_mut(i)) {
            slot.count = slot.count.saturating_add(hits);
            return;
        }
        if self.slots.len() < capacity {
            let (text, clear) = text();
            self.index.insert(hash, self.slots.len());
            self.slots.push(Slot {
                hash,
                count: hits,
                text,
                clear,
            });
            return;
        }
        // Space-saving: the newcomer takes the smallest slot and inherits its
        // count, so a true heavy hitter is never under-counted.
        let Some((i, min)) = self
            .slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.count)
            .map(|(i, s)| (i, s.count))
        else {
            return;
        };
        if let Some(slot) = self.slots.get_mut(i) {
            self.index.remove(&slot.hash);
            let (text, clear) = text();
            *slot = Slot {
                hash,
                count: min.saturating_add(hits),
                text,
                clear,
            };
            self.index.insert(hash, i);
        }
    }
}

#[derive(Debug, Default)]
struct Generations {
    current: Sketch,
    previous: Sketch,
    started: u64,
}

/// One key of the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopKey {
    pub key: String,
    /// Over-limit answers (an upper bound, as the sketch gives).
    pub over_limit: u64,
    /// The key in clear, for an authorised operator only.
    pub clear: Clear,
}

/// The bounded top of over-limit descriptors.
#[derive(Debug)]
pub struct TopKeys {
    inner: Mutex<Generations>,
    capacity: usize,
    show_addresses: bool,
    hasher: RandomState,
    /// Samples dropped because another request held the sketch.
    dropped: AtomicU64,
}

impl TopKeys {
    pub fn new(capacity: usize, show_addresses: bool) -> TopKeys {
        TopKeys {
            inner: Mutex::new(Generations::default()),
            capacity,
            show_addresses,
            hasher: RandomState::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Counts `hits` over-limit answers for `key` under rule `rule`, at Unix
    /// second `now`.
    pub fn record(&self, key: &CounterKey, rule: &str, hits: u64, now: u64) {
        if self.capacity == 0 {
            return;
        }
        let hash = self.hasher.hash_one(key.as_bytes());
        let Some(mut g) = self.inner.try_lock() else {
            self.dropped.fetch_add(1, Relaxed);
            return;
        };
        if now >= g.started + ROTATE_SECONDS {
            let stale = now >= g.started + WINDOW_SECONDS;
            g.previous = if stale {
                Sketch::default()
            } else {
                std::mem::take(&mut g.current)
            };
            g.current = Sketch::default();
            g.started = now - now % ROTATE_SECONDS;
        }
        let capacity = self.capacity;
        g.current
            .add(capacity, hash, hits.max(1), || self.render(key, rule, hash));
    }

    /// The `n` keys with the most over-limit answers in the last 30 to 60
    /// seconds (as of `now`), most first.
    pub fn top(&self, n: usize, now: u64) -> Vec<TopKey> {
        let g = self.inner.lock();
        let mut merged: HashMap<u64, (u64, &Slot)> = HashMap::new();
        let fresh = now < g.started + WINDOW_SECONDS;
        let previous_fresh = now < g.started + ROTATE_SECONDS;
        let sketches = [(&g.current, fresh), (&g.previous, previous_fresh)];
        for (sketch, live) in sketches {
            if !live {
                continue;
            }
            for s in &sketch.slots {
                let e = merged.entry(s.hash).or_insert((0, s));
                e.0 = e.0.saturating_add(s.count);
            }
        }
        let mut out: Vec<TopKey> = merged
            .into_values()
            .map(|(count, slot)| TopKey {
                key: slot.text.to_string(),
                over_limit: count,
                clear: slot.clear.clone(),
            })
            .collect();
        out.sort_by(|a, b| b.over_limit.cmp(&a.over_limit).then(a.key.cmp(&b.key)));
        out.truncate(n);
        out
    }

    /// Slots held and bytes of their text, for the memory bound.
    pub fn footprint(&self) -> (usize, usize) {
        let g = self.inner.lock();
        let slots = g.current.slots.len() + g.previous.slots.len();
        let bytes = g
            .current
            .slots
            .iter()
            .chain(&g.previous.slots)
            .map(|s| s.text.len())
            .sum();
        (slots, bytes)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    fn render(&self, key: &CounterKey, rule: &str, hash: u64) -> (Box<str>, Clear) {
        let (domain, entries) = key.parts();
        let cut = |v: &str| {
            let mut v = v.to_owned();
            crate::text::cut(&mut v, MAX_TEXT);
            v.into_boxed_str()
        };
        let clear = Clear {
            domain: cut(domain),
            rule: cut(rule),
            entries: entries.iter().map(|(k, v)| (cut(k), cut(v))).collect(),
        };
        let mut s = String::with_capacity(64);
        let _ = write!(s, "{domain} {rule}:");
        for (k, v) in entries {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            match (self.show_addresses, super::address::mask(k, v)) {
                (false, Some(masked)) => {
                    let _ = write!(s, "{masked}~{:04x}", hash & 0xffff);
                }
                _ => s.push_str(v),
            }
        }
        crate::text::cut(&mut s, MAX_TEXT);
        (s.into_boxed_str(), clear)
    }
}

#[cfg(test)]
#[path = "top_tests.rs"]
mod tests;
