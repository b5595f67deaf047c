//! Quota mode's own numbers per rule: the Envoys reporting it to this
//! instance, what they allowed and denied, the rule's rate and the rate
//! assigned. Quota keeps them and registers their families with the
//! metrics; the request counters a report also adds to are the rule's own
//! ([`crate::rule_stats::RuleStats`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::metrics::encode;

/// One rule's quota numbers.
#[derive(Debug, Default)]
pub(crate) struct RuleQuota {
    /// Requests Envoys reported allowed and denied.
    pub(crate) allowed: AtomicU64,
    pub(crate) denied: AtomicU64,
    /// (Envoy, bucket) pairs reporting the rule to this instance.
    pub(crate) envoys: AtomicI64,
    /// The rule's rate and the rate assigned to this instance's Envoys, in
    /// thousandths of a request per second.
    pub(crate) limit_milli: AtomicU64,
    pub(crate) assigned_milli: AtomicI64,
}

/// Domain and rule label.
type Key = (Arc<str>, Arc<str>);

/// Every rule's quota numbers, the same across reloads.
#[derive(Debug, Default)]
pub(crate) struct QuotaStats {
    rules: Mutex<BTreeMap<Key, Arc<RuleQuota>>>,
}

impl QuotaStats {
    /// The numbers of `label` in `domain`.
    pub(crate) fn rule(&self, domain: &str, label: &str) -> Arc<RuleQuota> {
        self.rules
            .lock()
            .entry((domain.into(), label.into()))
            .or_default()
            .clone()
    }

    /// The rules Envoys ever reported here, pointers copied under the lock;
    /// those no bucket holds any longer and no Envoy reports are dropped.
    fn snapshot(&self) -> Vec<(Key, Arc<RuleQuota>)> {
        let mut rules = self.rules.lock();
        rules.retain(|_, q| Arc::strong_count(q) > 1 || q.envoys.load(Relaxed) > 0);
        rules
            .iter()
            .filter(|(_, q)| q.limit_milli.load(Relaxed) > 0)
            .map(|(k, q)| (k.clone(), q.clone()))
            .collect()
    }
}

/// How a per-rule series reads its value.
#[derive(Clone, Copy)]
enum Read {
    Counter(fn(&RuleQuota) -> u64),
    Count(fn(&RuleQuota) -> i64),
    Rate(fn(&RuleQuota) -> f64),
}

/// The per-rule series: name, help, and how to read it.
const PER_RULE: [(&str, &str, Read); 5] = [
    (
        "sluice_quota_envoys",
        "Envoys reporting a bucket of the rule to this instance (one per Envoy and bucket).",
        Read::Count(|q| q.envoys.load(Relaxed)),
    ),
    (
        "sluice_quota_allowed",
        "Requests Envoys reported allowed under the rule's assignments.",
        Read::Counter(|q| q.allowed.load(Relaxed)),
    ),
    (
        "sluice_quota_denied",
        "Requests Envoys reported denied under the rule's assignments.",
        Read::Counter(|q| q.denied.load(Relaxed)),
    ),
    (
        "sluice_quota_assigned_per_second",
        "Requests per second assigned to this instance's Envoys under the rule (sum over buckets).",
        Read::Rate(|q| q.assigned_milli.load(Relaxed) as f64 / 1000.0),
    ),
    (
        "sluice_quota_limit_per_second",
        "The rule's rate per bucket, requests per second.",
        Read::Rate(|q| q.limit_milli.load(Relaxed) as f64 / 1000.0),
    ),
];

impl Collector for QuotaStats {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        let rules = self.snapshot();
        for (name, help, read) in PER_RULE {
            let series = rules
                .iter()
                .map(|((d, r), q)| ([("domain", &**d), ("rule", &**r)], &**q));
            match read {
                Read::Counter(f) => {
                    encode::counters(&mut enc, name, help, series.map(|(l, q)| (l, f(q))))
                }
                Read::Count(f) => {
                    encode::gauges(&mut enc, name, help, series.map(|(l, q)| (l, f(q))))
                }
                Read::Rate(f) => {
                    encode::gauges(&mut enc, name, help, series.map(|(l, q)| (l, f(q))))
                }
            }?;
        }
        Ok(())
    }
}
