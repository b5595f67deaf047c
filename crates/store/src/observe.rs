//! What the stores tell observation, from the side: the metrics implement
//! [`StoreObserver`], so the stores know no metrics library and the
//! compiler keeps them from reaching one.

use std::time::Duration;

/// How one call to the shared store ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall {
    Ok,
    Timeout,
    Error,
    /// The store refused one request's counter (not a store fault).
    Rejected,
}

/// Told of what the safety net around a store does; each call bumps a
/// number and returns (the request path calls it).
pub trait StoreObserver: Send + Sync {
    /// One call to the shared store, and how long it took.
    fn store_call(&self, call: StoreCall, took: Duration);
    /// Whether the breaker is open now.
    fn circuit(&self, open: bool);
    /// The breaker opened; `total` is its opens since start.
    fn circuit_trip(&self, total: u64);
    /// `n` descriptors decided by the failure policy `policy`.
    fn policy_decisions(&self, policy: &str, n: u64);
    /// Descriptors answered from leased allowance, and chunks taken.
    fn allowance(&self, answered: u64, leases: u64);
    /// Takes sent ahead of a lease running out (in the background).
    fn allowance_ahead(&self, takes: u64);
    /// Requests answered on credit (`count_after`), counts of them sent
    /// to the store, and hits the store never counted.
    fn credit(&self, _answered: u64, _sent: u64) {}
    fn credit_in_doubt(&self, _hits: u64) {}
    /// Leased hits never spent (given up when their lease lapsed).
    fn allowance_stranded(&self, hits: u64);
    /// Positions given back whose answer never came: the store may have
    /// taken them back unheard, so the usage may read over by them.
    fn allowance_unsettled(&self, hits: u64);
    /// Descriptors answered from the local over-limit cache.
    fn local_cache_hits(&self, n: u64);
    /// A request dropped before its store call: its caller had gone.
    fn abandoned(&self);
    /// A request shed after waiting past its store timeout in sluice's own
    /// queue; true when the caller should log it (the observer rate-limits
    /// the log).
    fn shed(&self) -> bool;
}

/// Observes nothing: for the store's unit tests, which read no metrics.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Unobserved;

#[cfg(test)]
impl StoreObserver for Unobserved {
    fn store_call(&self, _: StoreCall, _: Duration) {}
    fn circuit(&self, _: bool) {}
    fn circuit_trip(&self, _: u64) {}
    fn policy_decisions(&self, _: &str, _: u64) {}
    fn allowance(&self, _: u64, _: u64) {}
    fn allowance_ahead(&self, _: u64) {}
    fn allowance_stranded(&self, _: u64) {}
    fn allowance_unsettled(&self, _: u64) {}
    fn local_cache_hits(&self, _: u64) {}
    fn abandoned(&self) {}
    fn shed(&self) -> bool {
        true
    }
}
