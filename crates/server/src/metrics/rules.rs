//! The reference's per-rule counters, by domain and rule path: the table
//! that hands each compiled rule its counters and keeps them across reloads,
//! and the families it exports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{MetricBounds, RuleKey, RuleStats, encode};

/// Rule counters by domain, then by rule path (two levels, so a lookup
/// borrows the request's strings instead of allocating a key).
type RuleMap = BTreeMap<Arc<str>, BTreeMap<Arc<str>, Arc<RuleStats>>>;

#[derive(Debug)]
pub(super) struct RuleTable {
    bounds: MetricBounds,
    /// The usage histories every rule's counters share (`--max-usage-rules`).
    usage: Arc<crate::usage::UsageBudget>,
    map: Mutex<RuleMap>,
    /// Distinct `detailed_metric` label sets so far (changed under `map`).
    detailed: AtomicUsize,
}

impl RuleTable {
    pub(super) fn new(bounds: MetricBounds) -> RuleTable {
        RuleTable {
            bounds,
            usage: Arc::new(crate::usage::UsageBudget::new(bounds.usage_rules)),
            map: Mutex::default(),
            detailed: AtomicUsize::default(),
        }
    }

    pub(super) fn rule(&self, domain: &str, path: &str) -> Arc<RuleStats> {
        self.shared(&Arc::from(domain), &Arc::from(path))
    }

    /// [`RuleTable::rule`] for a compiled rule: a new entry is keyed by
    /// the rule's own strings, not copies.
    pub(super) fn shared(&self, domain: &Arc<str>, path: &Arc<str>) -> Arc<RuleStats> {
        let mut map = self.map.lock();
        // Borrowed lookup first: a reload of a million rules allocates
        // nothing for the ones already counted.
        if let Some(s) = map.get(&**domain).and_then(|paths| paths.get(&**path)) {
            return s.clone();
        }
        map.entry(domain.clone())
            .or_default()
            .entry(path.clone())
            .or_insert_with(|| Arc::new(RuleStats::within(self.usage.clone())))
            .clone()
    }

    pub(super) fn detailed(
        &self,
        domain: &str,
        path: &str,
        fallback: &Arc<RuleStats>,
    ) -> Arc<RuleStats> {
        if path.len() > self.bounds.label_bytes {
            return fallback.clone();
        }
        let mut map = self.map.lock();
        // Borrowed lookup first: a known label set allocates nothing.
        if let Some(s) = map.get(domain).and_then(|paths| paths.get(path)) {
            return s.clone();
        }
        if self.detailed.load(Relaxed) >= self.bounds.detailed_sets {
            return fallback.clone();
        }
        self.detailed.fetch_add(1, Relaxed);
        let stats = map
            .entry(domain.into())
            .or_default()
            .entry(path.into())
            .or_insert_with(|| Arc::new(RuleStats::within(self.usage.clone())))
            .clone();
        stats.mark_detailed();
        stats
    }

    pub(super) fn prune(&self) {
        let mut map = self.map.lock();
        for paths in map.values_mut() {
            paths.retain(|_, s| Arc::strong_count(s) > 1 || s.is_detailed());
        }
        map.retain(|_, paths| !paths.is_empty());
    }

    /// Copies pointers under the lock and lets go: requests that look up a
    /// rule's counters never wait for a scrape or a flush.
    pub(super) fn snapshot(&self) -> Vec<(RuleKey, Arc<RuleStats>)> {
        self.map
            .lock()
            .iter()
            .flat_map(|(domain, paths)| {
                paths
                    .iter()
                    .map(|(path, v)| ((domain.clone(), path.clone()), v.clone()))
            })
            .collect()
    }
}

const NO_LABELS: [(&str, &str); 0] = [];

/// The labels of a rule's series.
pub(super) fn labels(key: &RuleKey) -> [(&'static str, &str); 2] {
    [("domain", &*key.0), ("rule", &*key.1)]
}

impl RuleTable {
    /// The rules a scrape shows: those that have counted anything (a
    /// million configured customers cost a scrape nothing until they send),
    /// at most `--max-rule-series` of them, the busiest first; and how many
    /// with traffic were left out.
    fn scraped(&self) -> (Vec<(RuleKey, Arc<RuleStats>)>, usize) {
        let mut rules: Vec<(RuleKey, Arc<RuleStats>)> = self
            .map
            .lock()
            .iter()
            .flat_map(|(domain, paths)| {
                paths
                    .iter()
                    .filter(|(_, s)| s.total_hits.load(Relaxed) > 0 || s.refunded.load(Relaxed) > 0)
                    .map(|(path, v)| ((domain.clone(), path.clone()), v.clone()))
            })
            .collect();
        let cap = self.bounds.rule_series;
        let omitted = rules.len().saturating_sub(cap);
        if omitted > 0 {
            rules.select_nth_unstable_by_key(cap, |(_, s)| {
                std::cmp::Reverse(s.total_hits.load(Relaxed))
            });
            rules.truncate(cap);
            rules.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        (rules, omitted)
    }
}

impl Collector for RuleTable {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        let (rules, omitted) = self.scraped();
        encode::gauges(
            &mut enc,
            "sluice_rule_usage_tracked",
            "Rules keeping a usage history now (at most --max-usage-rules).",
            [(NO_LABELS, self.usage.used() as i64)],
        )?;
        encode::counters(
            &mut enc,
            "sluice_rule_usage_refused",
            "Rules whose usage history was not started because --max-usage-rules were kept.",
            [(NO_LABELS, self.usage.refused.load(Relaxed))],
        )?;
        encode::gauges(
            &mut enc,
            "sluice_rule_series_omitted",
            "Rules with traffic whose series this scrape left out (past --max-rule-series, the least busy).",
            [(NO_LABELS, omitted as i64)],
        )?;
        for (name, help, get) in RULE_COUNTERS {
            encode::counters(
                &mut enc,
                &format!("sluice_rule_{name}"),
                help,
                rules.iter().map(|(k, s)| (labels(k), get(s).load(Relaxed))),
            )?;
        }
        // Not one of the reference's counters (statsd has no such name).
        encode::counters(
            &mut enc,
            "sluice_rule_refunded_hits",
            "Hits given back to the rule's counters (is_negative_hits); never counted as hits.",
            rules
                .iter()
                .map(|(k, s)| (labels(k), s.refunded.load(Relaxed))),
        )?;
        let now = crate::limiter::Now::wall_us() / 1_000_000;
        let mut family = enc.encode_descriptor(
            "sluice_rule_key_usage",
            "Per-key peak usage of the rule: one observation per key and completed period (its window, or a minute for shorter ones); _sum is the hits.",
            None,
            prometheus_client::metrics::MetricType::Histogram,
        )?;
        for (k, s) in &rules {
            if let Some((buckets, count, sum)) = crate::usage::histogram(&s.usage, now) {
                family
                    .encode_family(&labels(k))?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        sum as f64, count, &buckets, None,
                    )?;
            }
        }
        Ok(())
    }
}

pub(crate) type Getter = fn(&RuleStats) -> &AtomicU64;

/// Each rule counter: its name, its help text and how to read it.
pub(crate) const RULE_COUNTERS: [(&str, &str, Getter); 5] = [
    ("total_hits", "Hits counted against the rule.", |s| {
        &s.total_hits
    }),
    ("over_limit", "Hits over the rule's limit.", |s| {
        &s.over_limit
    }),
    ("near_limit", "Hits above 80% of the limit.", |s| {
        &s.near_limit
    }),
    ("within_limit", "Hits within the limit.", |s| {
        &s.within_limit
    }),
    (
        "shadow_mode",
        "Over-limit hits let through by shadow mode.",
        |s| &s.shadow_mode,
    ),
];
