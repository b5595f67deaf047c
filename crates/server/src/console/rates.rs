//! Each rule's rates per second over the last minutes, sampled once a
//! second from the counters the rules already keep, for the console's
//! graphs. A million configured customers must cost the console nothing
//! while they are quiet, so only rules with traffic in the last
//! [`SAMPLES`] seconds hold a graph, and at most `--console-max-rules` of
//! them (the busiest win a place). A quiet rule costs 48 bytes and one
//! look at its `total_hits` in each pass to see it wake; a pass looks at
//! `--console-rules-per-second` rules a second, so a million rules cost
//! under 10 ms of a core a second, not a walk of all of them, and a
//! quiet rule that wakes is graphed within a pass (10 s at a million by
//! default), its first second holding the hits since it was last looked at.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::config::FastMap;
use crate::rule_stats::RuleStats;

/// Seconds of rates kept per graphed rule.
pub const SAMPLES: usize = 180;
/// Rules graphed at once by default (`--console-max-rules`).
pub const GRAPHED: usize = 1000;
/// Rules looked at for traffic each second by default
/// (`--console-rules-per-second`).
pub const WALKED: usize = 100_000;
/// Seconds of requests that rank graphed rules against a newcomer.
const RECENT: usize = 10;

/// One second of a rule: hits, near-limit hits, over-limit hits.
pub type Sample = [u32; 3];

/// Where a rule sits in a loaded snapshot: its domain's place and its own.
pub type Place = (usize, usize);

/// A rule that counted and holds no graph: its hits since the last sample,
/// its index among the watched rules, and its counters at the last sample.
/// An index, not its counters' `Arc`: under a flood across a million
/// customers a pass finds thousands, and cloning each would write to lines
/// the requests are counting on.
type Woke = (u64, usize, [u64; 3]);

/// A configured rule as the sampler watches it: one contiguous list, so a
/// quiet rule costs one pointer to follow and one comparison.
#[derive(Debug)]
struct Watched {
    stats: Arc<RuleStats>,
    place: Place,
    /// Its counters at the last sample.
    last: [u64; 3],
}

#[derive(Debug)]
struct Graph {
    /// Read each sample; held, so the address that keys the graph stays
    /// this rule's.
    stats: Arc<RuleStats>,
    place: Place,
    last: [u64; 3],
    samples: VecDeque<Sample>,
    /// Samples in a row without a hit: at [`SAMPLES`] the graph goes.
    quiet: usize,
    /// The sample that last saw the rule configured.
    seen: u64,
}

impl Graph {
    fn recent(&self) -> u64 {
        self.samples
            .iter()
            .rev()
            .take(RECENT)
            .map(|s| u64::from(s[0]))
            .sum()
    }
}

/// The graphs, and what is needed to see a quiet rule wake.
#[derive(Debug)]
pub struct Rates {
    graphs: FastMap<usize, Graph>,
    max: usize,
    /// Every configured rule, in snapshot order; renewed when the snapshot
    /// changes.
    rules: Vec<Watched>,
    /// Rules looked at each sample, and where the next sample starts.
    walked: usize,
    cursor: usize,
    snapshot: usize,
    tick: u64,
    /// Rules with traffic that hold no graph, among those the last sample
    /// looked at.
    pub ungraphed: usize,
    /// The last pass's woken rules, kept so a pass allocates nothing new
    /// (at most `walked`).
    woke: Vec<Woke>,
}

impl Default for Rates {
    fn default() -> Self {
        Rates::new(GRAPHED, WALKED)
    }
}

fn read(s: &RuleStats) -> [u64; 3] {
    [
        s.total_hits.load(Relaxed),
        s.near_limit.load(Relaxed),
        s.over_limit.load(Relaxed),
    ]
}

fn delta(now: [u64; 3], last: [u64; 3]) -> Sample {
    let mut out = [0u32; 3];
    for ((o, n), l) in out.iter_mut().zip(now).zip(last) {
        *o = u32::try_from(n.saturating_sub(l)).unwrap_or(u32::MAX);
    }
    out
}

impl Rates {
    /// Rates graphing at most `max` rules at once, looking at `walked`
    /// rules a sample for traffic (at least one).
    pub fn new(max: usize, walked: usize) -> Rates {
        Rates {
            graphs: FastMap::default(),
            max,
            rules: Vec::new(),
            walked: walked.max(1),
            cursor: 0,
            snapshot: 0,
            tick: 0,
            ungraphed: 0,
            woke: Vec::new(),
        }
    }

    /// Takes one sample of `rules`, every configured rule in the order of
    /// the snapshot `snapshot` names (its address: a new one resets what a
    /// quiet rule is compared with). Rules no longer configured are
    /// forgotten.
    pub fn sample<'a>(
        &mut self,
        snapshot: usize,
        rules: impl Iterator<Item = (Place, &'a Arc<RuleStats>)>,
    ) {
        self.tick += 1;
        // Graphed rules are read through the counters they hold.
        for g in self.graphs.values_mut() {
            let now = read(&g.stats);
            g.push(delta(now, g.last), now);
        }
        if snapshot != self.snapshot {
            self.snapshot = snapshot;
            self.renew(rules);
        } else {
            self.woken();
            self.admit();
        }
        self.graphs.retain(|_, g| g.quiet < SAMPLES);
    }

    /// A new snapshot: every rule's counters to compare with, graphed rules'
    /// new places, and the graphs of rules that left dropped.
    fn renew<'a>(&mut self, rules: impl Iterator<Item = (Place, &'a Arc<RuleStats>)>) {
        self.rules.clear();
        self.cursor = 0;
        for (place, stats) in rules {
            self.rules.push(Watched {
                stats: stats.clone(),
                place,
                last: read(stats),
            });
            if let Some(g) = self.graphs.get_mut(&(Arc::as_ptr(stats) as usize)) {
                g.place = place;
                g.seen = self.tick;
            }
        }
        let tick = self.tick;
        self.graphs.retain(|_, g| g.seen == tick);
    }

    /// The rules of this pass's slice that counted since they were last
    /// looked at and hold no graph: a quiet rule costs one load and one
    /// comparison.
    fn woken(&mut self) {
        let woke = &mut self.woke;
        woke.clear();
        let n = self.rules.len();
        let start = if self.cursor < n { self.cursor } else { 0 };
        let end = n.min(start.saturating_add(self.walked));
        self.cursor = end;
        let slice = self.rules.get_mut(start..end).unwrap_or_default();
        for (i, w) in (start..).zip(slice) {
            if w.stats.total_hits.load(Relaxed) == w.last[0] {
                continue;
            }
            let before = w.last;
            w.last = read(&w.stats);
            if !self.graphs.contains_key(&(Arc::as_ptr(&w.stats) as usize)) {
                let hits = w.last[0].saturating_sub(before[0]);
                woke.push((hits, i, before));
            }
        }
    }

    /// Gives rules that woke a graph, the busiest first; past `max` a
    /// newcomer takes the place of a graphed rule quieter than it lately.
    fn admit(&mut self) {
        let mut woke = std::mem::take(&mut self.woke);
        // Only the busiest `max` can take a place: a flood across a million
        // customers sorts no more than that.
        let cap = self.max.min(woke.len());
        let ungraphable = woke.len() - cap;
        if ungraphable > 0 {
            woke.select_nth_unstable_by_key(cap, |w| std::cmp::Reverse(w.0));
            woke.truncate(cap);
        }
        woke.sort_unstable_by_key(|w| std::cmp::Reverse(w.0));
        let mut quietest: Vec<(u64, usize)> = Vec::new();
        if self.graphs.len() + woke.len() > self.max {
            quietest = self.graphs.iter().map(|(k, g)| (g.recent(), *k)).collect();
            quietest.sort_unstable_by_key(|q| std::cmp::Reverse(q.0));
        }
        self.ungraphed = ungraphable;
        for &(hits, i, before) in &woke {
            if self.graphs.len() >= self.max {
                match quietest.pop() {
                    Some((recent, key)) if recent < hits => {
                        self.graphs.remove(&key);
                    }
                    _ => {
                        self.ungraphed += 1;
                        continue;
                    }
                }
            }
            let Some(w) = self.rules.get(i) else { continue };
            let (place, stats) = (w.place, w.stats.clone());
            let now = read(&stats);
            let key = Arc::as_ptr(&stats) as usize;
            let mut g = Graph {
                stats,
                place,
                last: now,
                samples: VecDeque::new(),
                quiet: 0,
                seen: self.tick,
            };
            g.push(delta(now, before), now);
            self.graphs.insert(key, g);
        }
        self.woke = woke;
    }

    /// The samples of the rule counting into `stats`, oldest first: empty
    /// when it holds no graph.
    pub fn of(&self, stats: &Arc<RuleStats>) -> Vec<Sample> {
        self.graphs
            .get(&(Arc::as_ptr(stats) as usize))
            .map(|g| g.samples.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The graphed rules' places in the snapshot last sampled, the busiest
    /// lately first.
    pub fn busiest(&self) -> Vec<Place> {
        let mut all: Vec<(u64, Place)> = self
            .graphs
            .values()
            .map(|g| (g.recent(), g.place))
            .collect();
        all.sort_unstable_by_key(|a| (std::cmp::Reverse(a.0), a.1));
        all.into_iter().map(|a| a.1).collect()
    }

    /// The snapshot last sampled (its address).
    pub fn snapshot(&self) -> usize {
        self.snapshot
    }
}

impl Graph {
    fn push(&mut self, sample: Sample, now: [u64; 3]) {
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.quiet = if sample[0] == 0 { self.quiet + 1 } else { 0 };
        self.last = now;
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;
