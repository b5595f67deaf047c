//! The counters' own numbers, registered with the metrics from the side:
//! lookups and resets by domain and rule, and callers refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::metrics::encode;

/// Distinct (domain, rule) pairs kept; past it they count under `_other`
/// (rules come from config, so only a huge config reaches it).
const MAX_SERIES: usize = 10_000;

/// What the counters endpoints did since start.
#[derive(Debug, Default)]
pub(crate) struct CounterStats {
    resets: Mutex<BTreeMap<(String, String), u64>>,
    lookups: AtomicU64,
    refused: AtomicU64,
}

impl CounterStats {
    pub(crate) fn lookup(&self) {
        self.lookups.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn reset(&self, domain: &str, rule: &str) {
        let mut resets = self.resets.lock();
        let full = resets.len() >= MAX_SERIES;
        let key = if full && !resets.contains_key(&(domain.to_owned(), rule.to_owned())) {
            ("_other".to_owned(), "_other".to_owned())
        } else {
            (domain.to_owned(), rule.to_owned())
        };
        *resets.entry(key).or_default() += 1;
    }
}

impl Collector for CounterStats {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        let resets = self.resets.lock();
        encode::counters(
            &mut enc,
            "sluice_counter_resets",
            "Counters reset through the admin port, by domain and rule.",
            resets
                .iter()
                .map(|((d, r), n)| ([("domain", d.as_str()), ("rule", r.as_str())], *n)),
        )?;
        drop(resets);
        encode::counter(
            &mut enc,
            "sluice_counter_lookups",
            "Counter lookups (and resets, which look up first) through the admin port.",
            self.lookups.load(Relaxed),
        )?;
        encode::counter(
            &mut enc,
            "sluice_admin_unauthorized",
            "Requests to the counters endpoints refused for a missing or wrong token (or a peer not on loopback when no token is configured).",
            self.refused.load(Relaxed),
        )
    }
}
