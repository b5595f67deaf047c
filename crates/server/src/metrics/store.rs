//! The shared store's families: call latency and failures, the breaker, the
//! failure policies' decisions, the local cache and the memory counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::bounds::Bound;
use super::service::gauge_value;
use super::stats::Histogram;
use super::{Metrics, StoreCall, encode};
use crate::store::StoreObserver;

/// The failure policies, in the order of [`StoreMetrics::policy_decisions`].
const POLICIES: [&str; 3] = ["fallback", "allow", "deny"];

#[derive(Debug, Default)]
pub(super) struct StoreMetrics {
    latency: Histogram,
    timeouts: AtomicU64,
    errors: AtomicU64,
    rejected: AtomicU64,
    pub(super) trips: AtomicU64,
    pub(super) counters_live: AtomicU64,
    pub(super) counter_evictions: AtomicU64,
    /// Descriptors decided by each failure policy: fallback, allow, deny.
    policy_decisions: [AtomicU64; POLICIES.len()],
    pub(super) circuit_open: AtomicU64,
    pub(super) local_cache_hits: AtomicU64,
    pub(super) allowance_answers: AtomicU64,
    pub(super) allowance_leases: AtomicU64,
    pub(super) allowance_stranded: AtomicU64,
    pub(super) allowance_unsettled: AtomicU64,
    pub(super) allowance_ahead: AtomicU64,
    /// Counting after: requests answered on credit, counts sent, hits lost.
    pub(super) credit: [AtomicU64; 3],
    /// The store's round trip, smoothed over answered calls (µs; 0 before
    /// any): the console tells a far store from a slow one by it.
    round_trip_us: AtomicU64,
}

impl StoreMetrics {
    pub(super) fn call(&self, call: StoreCall, took: Duration) {
        self.latency.observe(took);
        let c = match call {
            StoreCall::Ok => {
                let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
                let old = self.round_trip_us.load(Relaxed);
                let new = if old == 0 { us } else { (old * 15 + us) / 16 };
                self.round_trip_us.store(new.max(1), Relaxed);
                return;
            }
            StoreCall::Timeout => &self.timeouts,
            StoreCall::Error => &self.errors,
            StoreCall::Rejected => &self.rejected,
        };
        c.fetch_add(1, Relaxed);
    }

    pub(super) fn policy_decisions(&self, policy: &str, n: u64) {
        let i = POLICIES.iter().position(|p| *p == policy).unwrap_or(0);
        if let Some(c) = self.policy_decisions.get(i) {
            c.fetch_add(n, Relaxed);
        }
    }
}

impl Metrics {
    /// The store's round trip lately (smoothed over answered calls), if
    /// any call was answered.
    pub fn store_round_trip(&self) -> Option<Duration> {
        let us = self.store.round_trip_us.load(Relaxed);
        (us > 0).then(|| Duration::from_micros(us))
    }

    /// Chunks taken ahead of a lease running out, since start.
    pub fn store_renewals_ahead(&self) -> u64 {
        self.store.allowance_ahead.load(Relaxed)
    }

    /// Requests answered on credit (`count_after`), since start.
    pub fn store_credit_answered(&self) -> u64 {
        self.store.credit[0].load(Relaxed)
    }
}

/// The store's safety net tells the metrics what it did; it reads nothing
/// back, and the stores know no metrics library.
impl StoreObserver for Metrics {
    fn store_call(&self, call: StoreCall, took: Duration) {
        self.store.call(call, took);
    }

    fn circuit(&self, open: bool) {
        self.store.circuit_open.store(u64::from(open), Relaxed);
    }

    fn circuit_trip(&self, total: u64) {
        self.store.trips.store(total, Relaxed);
    }

    fn policy_decisions(&self, policy: &str, n: u64) {
        self.store.policy_decisions(policy, n);
    }

    fn allowance(&self, answered: u64, leases: u64) {
        self.store.allowance_answers.fetch_add(answered, Relaxed);
        self.store.allowance_leases.fetch_add(leases, Relaxed);
    }

    fn allowance_ahead(&self, takes: u64) {
        self.store.allowance_ahead.fetch_add(takes, Relaxed);
    }

    fn credit(&self, answered: u64, sent: u64) {
        let [a, s, _] = &self.store.credit;
        a.fetch_add(answered, Relaxed);
        s.fetch_add(sent, Relaxed);
    }

    fn credit_in_doubt(&self, hits: u64) {
        self.store.credit[2].fetch_add(hits, Relaxed);
    }

    fn allowance_unsettled(&self, hits: u64) {
        self.store.allowance_unsettled.fetch_add(hits, Relaxed);
    }

    fn allowance_stranded(&self, hits: u64) {
        self.store.allowance_stranded.fetch_add(hits, Relaxed);
    }

    fn local_cache_hits(&self, n: u64) {
        self.store.local_cache_hits.fetch_add(n, Relaxed);
    }

    fn abandoned(&self) {
        self.bound_hit(Bound::Abandoned, 1);
    }

    fn shed(&self) -> bool {
        self.bound_hit(Bound::Shed, 1)
    }
}

impl Collector for StoreMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        encode::histogram(
            &mut enc,
            "sluice_store_duration_seconds",
            "Time of calls to the shared store.",
            &self.latency,
        )?;
        encode::counters(
            &mut enc,
            "sluice_store_errors",
            "Failed calls to the shared store, by kind.",
            [
                ("timeout", &self.timeouts),
                ("error", &self.errors),
                ("rejected", &self.rejected),
            ]
            .map(|(kind, c)| ([("kind", kind)], c.load(Relaxed))),
        )?;
        encode::counters(
            &mut enc,
            "sluice_store_policy_decisions",
            "Descriptors decided by a failure policy (--store-failure or a rule's on_store_failure) while the store failed.",
            POLICIES
                .iter()
                .zip(&self.policy_decisions)
                .map(|(p, c)| ([("policy", *p)], c.load(Relaxed))),
        )?;
        encode::gauge(
            &mut enc,
            "sluice_store_circuit_open",
            "1 while the store is considered down and not asked.",
            gauge_value(self.circuit_open.load(Relaxed)),
        )?;
        encode::counter(
            &mut enc,
            "sluice_store_local_cache_hits",
            "Descriptors answered over-limit from the local cache.",
            self.local_cache_hits.load(Relaxed),
        )?;
        encode::counter(
            &mut enc,
            "sluice_store_allowance_answers",
            "Descriptors answered from allowance leased from the shared store, without a store call.",
            self.allowance_answers.load(Relaxed),
        )?;
        self.encode_local(&mut enc)
    }
}

impl StoreMetrics {
    /// Counting after: answers on credit, counts sent, hits in doubt.
    fn encode_credit(&self, enc: &mut DescriptorEncoder<'_>) -> encode::Result {
        let [answered, sent, doubt] = &self.credit;
        encode::counter(
            enc,
            "sluice_store_credit_answered",
            "Requests of rules that count after (count_after) answered on this instance's credit, before the store counted them.",
            answered.load(Relaxed),
        )?;
        encode::counter(
            enc,
            "sluice_store_credit_counts",
            "Counts of hits answered on credit sent to the store (one per counter, batched every --count-after-interval).",
            sent.load(Relaxed),
        )?;
        encode::counter(
            enc,
            "sluice_store_credit_in_doubt",
            "Hits answered on credit whose count failed (an error, or no answer in time): the store may not have counted them, so they are never sent again and hold their key's credit until its window ends.",
            doubt.load(Relaxed),
        )
    }

    /// What this instance keeps beside the store: leases, the breaker, the
    /// clock it follows, the counters in memory.
    fn encode_local(&self, enc: &mut DescriptorEncoder<'_>) -> encode::Result {
        encode::counter(
            enc,
            "sluice_store_allowance_leases",
            "Chunks of a limit leased from the shared store (one store call each).",
            self.allowance_leases.load(Relaxed),
        )?;
        encode::counter(
            enc,
            "sluice_store_allowance_renewals_ahead",
            "Chunks taken ahead of a lease running out, in the background, so no request waits for the store (one store call each, batched).",
            self.allowance_ahead.load(Relaxed),
        )?;
        encode::counter(
            enc,
            "sluice_store_allowance_stranded",
            "Leased hits never spent: the lease lapsed (its window ended, half a second passed, it was replaced or dropped), so no instance admits them.",
            self.allowance_stranded.load(Relaxed),
        )?;
        encode::counter(
            enc,
            "sluice_store_allowance_unsettled",
            "Leased positions given back after their window whose answer never came: the store may have taken them back unheard, so the usage advisor may read over by them.",
            self.allowance_unsettled.load(Relaxed),
        )?;
        self.encode_credit(enc)?;
        encode::counter(
            enc,
            "sluice_store_circuit_trips",
            "Times the store was declared down.",
            self.trips.load(Relaxed),
        )?;
        encode::gauges(
            enc,
            "sluice_store_clock_offset_seconds",
            "How far the clock windows are picked by (Redis's, read every 5 s) is ahead of this host's wall clock (negative: behind); 0 before Redis was read.",
            [(
                [("store", "redis")],
                crate::limiter::clock::offset_ms() as f64 / 1000.0,
            )],
        )?;
        encode::gauge(
            enc,
            "sluice_memory_counters",
            "Counters held in memory (the memory store or the fallback), at the last sweep.",
            gauge_value(self.counters_live.load(Relaxed)),
        )?;
        encode::counter(
            enc,
            "sluice_memory_counter_evictions",
            "Live counters dropped because --max-counters was reached.",
            self.counter_evictions.load(Relaxed),
        )
    }
}
