//! What the console remembers: each rule's rates per second over the last
//! minutes, sampled from the counters the rules already keep, and a short
//! journal of store failovers and config loads. Both are bounded: a ring per
//! configured rule, and a fixed number of events.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use crate::rule_stats::RuleStats;

/// Seconds of rates kept per rule.
pub const SAMPLES: usize = 180;
/// Events kept per journal.
pub const EVENTS: usize = 50;

/// One second of a rule: hits, near-limit hits, over-limit hits.
pub type Sample = [u32; 3];

#[derive(Debug, Default)]
struct Ring {
    last: [u64; 3],
    samples: VecDeque<Sample>,
}

/// Per-rule rates, keyed by domain and rule label.
#[derive(Debug, Default)]
pub struct Rates {
    rules: HashMap<(Arc<str>, Box<str>), Ring>,
}

impl Rates {
    /// Takes one sample of every rule in `rules`; rules no longer configured
    /// are forgotten.
    pub fn sample<'a>(
        &mut self,
        rules: impl Iterator<Item = (&'a Arc<str>, &'a str, &'a RuleStats)>,
    ) {
        let mut seen = HashMap::with_capacity(self.rules.len());
        for (domain, label, stats) in rules {
            let key = (domain.clone(), Box::from(label));
            let mut ring = self.rules.remove(&key).unwrap_or_default();
            let now = [
                stats.total_hits.load(Relaxed),
                stats.near_limit.load(Relaxed),
                stats.over_limit.load(Relaxed),
            ];
            // The first sample of a rule only sets the baseline.
            let first = ring.samples.is_empty() && ring.last == [0; 3];
            let mut sample = [0u32; 3];
            for ((s, n), l) in sample.iter_mut().zip(now).zip(ring.last) {
                *s = u32::try_from(n.saturating_sub(l)).unwrap_or(u32::MAX);
            }
            ring.last = now;
            if !first || now == [0; 3] {
                if ring.samples.len() == SAMPLES {
                    ring.samples.pop_front();
                }
                ring.samples.push_back(sample);
            }
            seen.insert(key, ring);
        }
        self.rules = seen;
    }

    /// The samples of one rule, oldest first.
    pub fn of(&self, domain: &Arc<str>, label: &str) -> Vec<Sample> {
        self.rules
            .get(&(domain.clone(), Box::from(label)))
            .map(|r| r.samples.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// Something that happened, for the console's histories.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Unix seconds.
    pub at: u64,
    pub what: String,
}

/// A bounded journal, newest last.
#[derive(Debug, Default)]
pub struct Journal {
    events: VecDeque<Event>,
}

impl Journal {
    pub fn push(&mut self, at: u64, what: String) {
        if self.events.len() == EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event { at, what });
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_and_bounded() {
        let stats = RuleStats::default();
        let d: Arc<str> = Arc::from("api");
        let mut r = Rates::default();
        for i in 0..(SAMPLES as u64 + 20) {
            stats.total_hits.fetch_add(i, Relaxed);
            r.sample([(&d, "rule", &stats)].into_iter());
        }
        let s = r.of(&d, "rule");
        assert_eq!(s.len(), SAMPLES);
        assert_eq!(s.last().unwrap()[0], SAMPLES as u32 + 19);
        // A rule that is gone is forgotten.
        r.sample(std::iter::empty());
        assert!(r.of(&d, "rule").is_empty());
    }

    #[test]
    fn journals_keep_the_newest() {
        let mut j = Journal::default();
        for i in 0..(EVENTS as u64 + 5) {
            j.push(i, format!("e{i}"));
        }
        let e = j.events();
        assert_eq!(e.len(), EVENTS);
        assert_eq!(e.last().unwrap().what, format!("e{}", EVENTS + 4));
    }
}
