//! One limit's recent usage: a ring of [`SLOTS`] periods, each holding how
//! many keys crossed each level ([`levels`](super::levels)) and the hits
//! behind them. A period is the rule's window, or a minute for shorter
//! windows (their windows merge into it, each still counted per window);
//! 64 of them keep at least the last hour, and at least the last 24
//! windows of a longer rule. Memory is fixed per limit (allocated on its
//! first request) whatever the number of keys, and a request costs one or
//! two relaxed atomic adds.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed,
    Ordering::Release,
};

use super::levels;

/// Periods kept.
pub const SLOTS: usize = 64;
/// The shortest period: shorter windows merge into a minute.
const MIN_PERIOD: u64 = 60;
/// A slot's period while its first request of a new period empties it.
const EMPTYING: u64 = u64::MAX;

#[derive(Debug)]
struct Slot {
    /// The period's index (start / period) plus one; 0: never used.
    period: AtomicU64,
    /// Keys that crossed each level in the period, less those a refund
    /// took back below it. Signed: a refund through this instance of hits
    /// another instance counted takes its key back here, so this
    /// instance's share can go below 0 while the fleet's sum is exact.
    keys: Box<[AtomicI32]>,
    hits: AtomicU64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            period: AtomicU64::new(0),
            keys: (0..levels::len()).map(|_| AtomicI32::new(0)).collect(),
            hits: AtomicU64::new(0),
        }
    }

    /// Makes this slot period `tag`'s (its index plus one), emptying it
    /// if it held an older one; false if it already holds a newer one.
    /// The first request of a period marks the slot [`EMPTYING`] while it
    /// empties it, and a request racing it waits those few stores out
    /// (once a period) rather than write a count the emptying would lose.
    fn enter(&self, tag: u64) -> bool {
        loop {
            let seen = self.period.load(Acquire);
            if seen == tag {
                return true;
            }
            if seen == EMPTYING {
                std::hint::spin_loop();
                std::thread::yield_now();
                continue;
            }
            if seen > tag {
                return false;
            }
            if self
                .period
                .compare_exchange(seen, EMPTYING, Acquire, Relaxed)
                .is_ok()
            {
                self.keys.iter().for_each(|k| k.store(0, Relaxed));
                self.hits.store(0, Relaxed);
                self.period.store(tag, Release);
                return true;
            }
        }
    }
}

/// One period as read: its start (Unix seconds), its length, keys per
/// level, and hits.
#[derive(Debug, Clone)]
pub struct Period {
    pub start: u64,
    pub seconds: u64,
    /// Keys per level: this instance's share of the fleet's (signed).
    pub keys: Vec<i64>,
    pub hits: u64,
}

/// A limit's recent usage.
#[derive(Debug, Default)]
pub struct Usage {
    /// Built on the first record: boxed whole, so a rule that never
    /// records (most of a million per-customer rules, past
    /// `--max-usage-rules`) holds one pointer, not the totals' room.
    kept: OnceLock<Box<Kept>>,
    /// The window of the last record, for readers that have no rule.
    window: AtomicU64,
    /// The fleet of histories this one may join (`--max-usage-rules`): a
    /// history costs about 100 KiB, so a million per-customer rules must
    /// not each grow one. None: unbounded (a rule table of its own).
    budget: Option<Arc<UsageBudget>>,
    /// This rule was refused a history once: counted then, never again,
    /// so a rule past the budget writes nothing the fleet shares on each
    /// request (two cores bouncing one counter's line cost every request
    /// at a million rules).
    refused: AtomicBool,
}

/// How many limits may keep a usage history at once
/// (`--max-usage-rules`), and how many rules were refused one.
#[derive(Debug)]
pub struct UsageBudget {
    max: usize,
    used: AtomicUsize,
    pub refused: AtomicU64,
}

impl UsageBudget {
    pub fn new(max: usize) -> UsageBudget {
        UsageBudget {
            max,
            used: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Histories kept now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// A place, if one is free. Past the budget this only reads `used`.
    fn take(&self) -> bool {
        self.used
            .fetch_update(Relaxed, Relaxed, |n| (n < self.max).then_some(n + 1))
            .is_ok()
    }
}

/// A kept history: its slots, and completed periods folded into running
/// totals (the exposition's histogram; only a scrape takes this lock).
#[derive(Debug)]
pub struct Kept {
    slots: Box<[Slot]>,
    pub totals: parking_lot::Mutex<Totals>,
}

impl Drop for Usage {
    fn drop(&mut self) {
        if let (Some(b), Some(_)) = (&self.budget, self.kept.get()) {
            b.used.fetch_sub(1, Relaxed);
        }
    }
}

/// Running totals of completed periods: keys per exported bucket (not
/// cumulative), keys, hits, and the last period folded (index plus one).
#[derive(Debug, Default)]
pub struct Totals {
    pub buckets: Vec<u64>,
    pub keys: u64,
    pub hits: u64,
    pub folded: u64,
}

/// The period a window of `window_s` seconds is counted in.
pub fn period_of(window_s: u64) -> u64 {
    window_s.max(MIN_PERIOD)
}

impl Usage {
    /// A history that joins `budget` on its first record.
    pub fn within(budget: Arc<UsageBudget>) -> Usage {
        Usage {
            kept: OnceLock::new(),
            window: AtomicU64::new(0),
            budget: Some(budget),
            refused: AtomicBool::new(false),
        }
    }

    /// A first record: joins the budget and builds the history, or is not
    /// kept (`None`).
    fn first(&self) -> Option<&Kept> {
        if let Some(b) = self.budget.as_ref().filter(|b| !b.take()) {
            self.refuse(b);
            return None;
        }
        let mut built = false;
        let kept = self.kept.get_or_init(|| {
            built = true;
            Box::new(Kept {
                slots: (0..SLOTS).map(|_| Slot::new()).collect(),
                totals: parking_lot::Mutex::default(),
            })
        });
        if let (false, Some(b)) = (built, &self.budget) {
            // Another first record built it: give the place back.
            b.used.fetch_sub(1, Relaxed);
        }
        Some(kept)
    }

    /// Counts this rule refused by `budget`, the first time only.
    fn refuse(&self, budget: &UsageBudget) {
        if !self.refused.load(Relaxed) && !self.refused.swap(true, Relaxed) {
            budget.refused.fetch_add(1, Relaxed);
        }
    }

    /// A counter of a window of `window_s` went from `before` to `after`
    /// at Unix second `now`, for `hits` (0 for a refund, which lowers it).
    pub fn record(&self, window_s: u64, now: u64, before: u64, after: u64, hits: u64) {
        self.moved(
            window_s,
            now,
            (before, after),
            i64::try_from(hits).unwrap_or(i64::MAX),
        );
    }

    /// Positions leased and never spent, given back when their window
    /// ended: the counter went from `before` down to `after`, and those
    /// hits were never sent (the take that counted them said they were).
    pub fn given_back(&self, window_s: u64, now: u64, before: u64, after: u64) {
        let back = i64::try_from(before.saturating_sub(after)).unwrap_or(i64::MAX);
        self.moved(window_s, now, (before, after), -back);
    }

    /// A counter moved from `before` to `after`, its hits total by `hits`.
    fn moved(&self, window_s: u64, now: u64, (before, after): (u64, u64), hits: i64) {
        let (from, to) = levels::indices(before, after);
        if from == to && hits == 0 {
            return;
        }
        let Some(slots) = self
            .kept
            .get()
            .map(|k| &**k)
            .or_else(|| self.first())
            .map(|k| &k.slots)
        else {
            return;
        };
        if self.window.load(Relaxed) != window_s {
            self.window.store(window_s, Relaxed);
        }
        let p = now / period_of(window_s);
        #[allow(clippy::indexing_slicing, reason = "taken modulo the slot count")]
        let slot = &slots[usize::try_from(p % SLOTS as u64).unwrap_or(0)];
        if !slot.enter(p + 1) {
            return; // a request from a period already left behind
        }
        if hits >= 0 {
            slot.hits.fetch_add(hits.unsigned_abs(), Relaxed);
        } else {
            let back = hits.unsigned_abs();
            let _ = slot
                .hits
                .fetch_update(Relaxed, Relaxed, |h| Some(h.saturating_sub(back)));
        }
        if to > from {
            for k in slot.keys.get(from..to).into_iter().flatten() {
                k.fetch_add(1, Relaxed);
            }
        } else {
            for k in slot.keys.get(to..from).into_iter().flatten() {
                k.fetch_sub(1, Relaxed);
            }
        }
    }

    /// The window of the last record (0 before any).
    pub fn window(&self) -> u64 {
        self.window.load(Relaxed)
    }

    /// The running totals of a kept history; `None` before its first
    /// record.
    pub fn totals(&self) -> Option<&parking_lot::Mutex<Totals>> {
        self.kept.get().map(|k| &k.totals)
    }

    /// The periods within the last `periods` of `window_s`'s period, as of
    /// `now`, oldest first (the current one last, still filling).
    pub fn periods(&self, window_s: u64, now: u64, periods: u64) -> Vec<Period> {
        let Some(slots) = self.kept.get().map(|k| &k.slots) else {
            return Vec::new();
        };
        let len = period_of(window_s);
        let current = now / len;
        let mut out: Vec<Period> = slots
            .iter()
            .filter_map(|s| {
                let p = s.period.load(Relaxed).checked_sub(1)?;
                (p <= current && current - p < periods).then(|| Period {
                    start: p * len,
                    seconds: len,
                    keys: s.keys.iter().map(|k| i64::from(k.load(Relaxed))).collect(),
                    hits: s.hits.load(Relaxed),
                })
            })
            .collect();
        out.sort_by_key(|p| p.start);
        out
    }

    /// Bytes this limit holds now.
    #[cfg(test)]
    pub fn footprint(&self) -> usize {
        self.kept
            .get()
            .map_or(0, |k| k.slots.len() * (levels::len() * 4 + 16))
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
