//! Counter stores behind one small trait: each increments a batch of fixed-window
//! counters and returns the counts after the increment, atomically per counter.
//!
//! The crate `sluice-store`, above the core (`sluice-core`) and below the
//! server: it knows the core's decisions and nothing of rules, protobuf or
//! metrics (it tells a [`StoreObserver`]). `sluice` re-exports it as
//! `sluice::store`.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
// A request must never panic: no unwrap, expect or unchecked indexing outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub(crate) use sluice_core::{hex, limiter, text};

mod allowance;
mod batch;
mod breaker;
mod cache;
mod calls;
mod coalesce;
mod credit;
pub mod demand;
mod io_thread;
pub mod key;
mod lag;
pub mod memcache;
mod memory;
mod observe;
mod policy;
mod pool;
pub mod redis;
mod resilient;
mod script;
mod sentinel;
mod slots;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use cache::OverLimitCache;
pub use key::{CounterKey, KeySpace};
pub use memory::{DEFAULT_MAX_COUNTERS, MemoryStore};
#[cfg(test)]
pub(crate) use observe::Unobserved;
pub use observe::{StoreCall, StoreObserver};
pub use policy::{FailurePolicy, shed};
pub use resilient::{Hearing, Primary, Resilient, ResilientOptions};

use crate::limiter::{Algorithm, Tally, Window};

/// A boxed future, so stores can sit behind `dyn Store`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store's counts for a batch: at hand, or to wait for.
pub enum Answer<'a> {
    Now(Result<Vec<Tally>, StoreError>),
    Later(BoxFuture<'a, Result<Vec<Tally>, StoreError>>),
}

/// Add `hits` to the counter `key` of `window`.
#[derive(Debug, Clone)]
pub struct Increment {
    pub key: CounterKey,
    pub hits: u64,
    /// The request's one clock reading, in microseconds since the epoch:
    /// `window` holds it, and a token bucket refills by it. Stores never
    /// read the clock for a count.
    pub at_us: u64,
    /// Give `hits` back (`is_negative_hits`): the counter goes down, floored
    /// at empty, and a counter that is not there is not made.
    pub refund: bool,
    /// The local over-limit cache may answer for this counter: false for a
    /// rule whose counters can be given back (`refundable`, or one that has
    /// taken a refund), so no instance refuses from a stale memory.
    pub cacheable: bool,
    /// This instance may answer the counter from allowance leased from the
    /// store ([`allowance`]): false for a rule that opts out
    /// (`leased_allowance: false`).
    pub leasable: bool,
    /// A token bucket's usage (the tokens its key asked for in the window)
    /// counts the hits it refused too: for a rule in shadow mode, which
    /// refuses no one, so its whole demand is its usage. Otherwise only
    /// hits taken count, and a refused request writes nothing.
    pub usage_counts_refused: bool,
    /// `algorithm: concurrency`: the slot this request holds (or releases),
    /// the value of the descriptor's last entry; the counter is the rest.
    pub slot: Option<Box<str>>,
    /// The limit the count will be held against (for the over-limit cache),
    /// and a token bucket's refill rate per window.
    pub limit: u32,
    /// The window the hits fall in (a token bucket's refill period).
    pub window: Window,
    pub algorithm: Algorithm,
    /// The rule's `on_store_failure`, over the server's `--store-failure`.
    pub on_failure: Option<FailurePolicy>,
    /// Who hears of this counter's hits that the store counts after their
    /// request was answered (a shadow-mode rule's, answered from the
    /// over-limit cache); `None` for every other rule.
    pub late: Option<Arc<dyn CountedLate>>,
    /// Who hears the usage of the hits this instance answers from leased
    /// allowance ([`allowance`]): the whole chunk when it is taken, and
    /// the positions given back when the window ends unspent, each as the
    /// store's count moved. The rule's usage, for a leasable counter.
    pub leased_usage: Option<Arc<dyn CountedLate>>,
    /// A take of a chunk to lease in a request's place ([`allowance`]):
    /// `None` for every increment a request makes itself.
    pub take: Option<Take>,
    /// Its rule counts after (`count_after`): this instance may answer it
    /// from its credit and count it in the store after ([`credit`]).
    pub count_after: bool,
}

/// What a take of a chunk carries beside the chunk (its `hits`): the
/// request's own hits, and when its caller stops waiting. A store that
/// runs the take after that counts the request's own hits only: the caller
/// has given the take up, so a chunk counted then would be leased to no one
/// and refuse others for the rest of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    pub own: u64,
    /// On the clock decisions follow, in µs since the epoch.
    pub until_us: u64,
}

/// Told of hits the store counted after their requests were answered: a
/// shadow-mode rule's answered from the over-limit cache, counted by the
/// background in one increment (`inc`, whose `hits` they are), `tally` the
/// store's count after. Observation from the side: the store knows nothing
/// of who listens.
pub trait CountedLate: Send + Sync + std::fmt::Debug {
    fn counted_late(&self, inc: &Increment, tally: Tally);

    /// Leased positions never spent, given back when their window ended
    /// (`inc`, a refund of them); `tally` the store's count after.
    fn leased_back(&self, _inc: &Increment, _tally: Tally) {}
}

/// A shadow-mode rule's hits answered from the over-limit cache reach its
/// usage (the core's) when the store has counted them.
impl CountedLate for sluice_core::rule_stats::RuleStats {
    fn counted_late(&self, inc: &Increment, tally: Tally) {
        let crossed = sluice_core::usage::crossing(tally, inc.hits, inc.refund);
        if let Some((before, after, hits)) = crossed {
            let window = inc.window.period.seconds();
            self.usage
                .record(window, inc.at_us / 1_000_000, before, after, hits);
        }
    }

    fn leased_back(&self, inc: &Increment, tally: Tally) {
        // 0: the counter was gone (expired, or reset), and with it what
        // the take had counted; nothing to take back.
        if let Tally::Count(after) = tally
            && after > 0
        {
            let window = inc.window.period.seconds();
            let before = after.saturating_add(inc.hits);
            self.usage
                .given_back(window, inc.at_us / 1_000_000, before, after);
        }
    }
}

impl Increment {
    /// Whether a token bucket's answer `tally` counts in its usage: a
    /// refund and hits taken always (an overdraft bucket takes every hit),
    /// refused hits only where the usage is the whole demand
    /// ([`Increment::usage_counts_refused`]).
    pub(crate) fn counts_usage(&self, tally: &Tally) -> bool {
        self.refund
            || self.usage_counts_refused
            || self.algorithm.refill().is_some_and(|r| r.overdraft)
            || matches!(tally, Tally::Bucket { taken: true, .. })
    }
}

#[cfg(test)]
impl Increment {
    /// One hit on the counter `k=value` of domain `d`, a fixed window of a
    /// minute, at the clock reading `at_us` (unit tests' increment).
    pub(crate) fn test_hit(value: &str, limit: u32, at_us: u64) -> Increment {
        let now = crate::limiter::Now(at_us / 1_000_000);
        let minute = crate::limiter::Unit::Minute;
        Increment {
            key: CounterKey::new("d", minute, [("k", value)]),
            hits: 1,
            at_us,
            refund: false,
            cacheable: true,
            leasable: false,
            usage_counts_refused: false,
            slot: None,
            limit,
            window: Window::containing(minute, now),
            algorithm: Algorithm::FixedWindow,
            on_failure: None,
            late: None,
            leased_usage: None,
            take: None,
            count_after: false,
        }
    }
}

/// Why a store could not count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store timed out")]
    Timeout,
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store answered something that does not fit the call (too few
    /// counts, garbage): the store is at fault, never a silent admit.
    #[error("store answered a malformed reply: {0}")]
    BadReply(String),
    /// The store refused this request's own data (a counter that would
    /// overflow, a key holding something else). It says nothing about the
    /// store's health, so it never feeds the circuit breaker.
    #[error("store refused this request's counter: {0}")]
    Rejected(String),
    /// sluice itself could not ask the store in time (too many decisions
    /// waiting, or its own queue slower than the store timeout while the
    /// store was answering). Not a store fault: it never feeds the breaker
    /// and never moves counting onto the fallback.
    #[error("sluice overloaded, request shed: {0}")]
    Busy(String),
}

impl StoreError {
    /// Whether the error tells that the store itself is failing.
    pub fn is_store_fault(&self) -> bool {
        !matches!(self, StoreError::Rejected(_) | StoreError::Busy(_))
    }
}

/// Entries looked at to choose one to drop when a shard of the memory
/// store or of its concurrency slots is full. Here, not in either, so
/// neither imports the other for it.
pub const SAMPLE: usize = 16;

/// How full an in-memory store is (live counters and evictions), for the
/// gauges; not the counters endpoints' own stats (`counters::CounterStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub live: u64,
    /// Counters dropped to make room since start.
    pub evictions: u64,
}

/// Checks that a store's answer has one count per increment.
pub fn expect_counts<T>(counts: Vec<T>, expected: usize) -> Result<Vec<T>, StoreError> {
    same_length(counts.len(), expected).map(|()| counts)
}

/// A reply of `got` counts for `expected` increments: anything but equal is
/// the store's fault.
pub(crate) fn same_length(got: usize, expected: usize) -> Result<(), StoreError> {
    if got == expected {
        Ok(())
    } else {
        Err(StoreError::BadReply(format!(
            "{got} counts for {expected} increments"
        )))
    }
}

/// The health a store reports to `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreHealth {
    /// The configured store: `memory`, `redis` or `redis-cluster`.
    pub backend: &'static str,
    /// What decides right now: the backend, or the failure policy while it is
    /// down (`memory-fallback`, `allow-all`, `deny-all`).
    pub in_use: &'static str,
    pub healthy: bool,
    /// The store has answered at least once since start (the reference's
    /// `/healthcheck` stays failing until it has).
    pub reached: bool,
    pub detail: Option<String>,
}

/// A place where counters live.
pub trait Store: Send + Sync + 'static {
    /// Counts every increment of the batch by its algorithm and reports each
    /// counter, in batch order.
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>>;

    /// Whether a call may wait (for a server, a lock held across a wait):
    /// false for the memory store, which a request path need not admit
    /// past `--max-pending` or shed, as nothing waits for it.
    fn waits(&self) -> bool {
        true
    }

    /// The counts of `batch` at once when this store has them without
    /// waiting (the memory store always; a shared store when every
    /// increment is answered here, from a lease, the over-limit cache or
    /// credit), else the call that waits, as [`Store::increment_until`]:
    /// no future to box and poll on the request path when nothing waits.
    fn answer<'a>(
        &'a self,
        batch: &'a [Increment],
        deadline: Option<tokio::time::Instant>,
    ) -> Answer<'a> {
        Answer::Later(self.increment_until(batch, deadline))
    }

    /// As [`Store::increment`], for a caller that will not wait past
    /// `deadline`: a store that waits for a reply answers by then.
    fn increment_until<'a>(
        &'a self,
        batch: &'a [Increment],
        _deadline: Option<tokio::time::Instant>,
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        self.increment(batch)
    }

    fn health(&self) -> StoreHealth;

    /// Sets every counter of `batch`'s increments back to empty: both
    /// windows of a sliding window, a bucket full, every concurrency slot
    /// released (an operator's reset, `POST /api/counters/reset`). A store
    /// that cannot says so.
    fn reset<'a>(&'a self, _batch: &'a [Increment]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable(
            "this store cannot reset counters".into(),
        ))))
    }

    /// Periodic housekeeping, such as freeing ended windows.
    fn sweep(&self, _now: crate::limiter::Now) {}

    /// Counters held in this process's memory (the memory store, or the
    /// fallback of a shared one).
    fn counters(&self) -> Occupancy {
        Occupancy::default()
    }

    /// Writes one member's demand for a quota bucket and reads the fleet's;
    /// when the store cannot, the failure policy answers. A store without
    /// demand tables (a test's fake) allows everything.
    fn demand<'a>(&'a self, _update: &'a demand::DemandUpdate) -> BoxFuture<'a, demand::Fleet> {
        Box::pin(std::future::ready(demand::Fleet::Allow))
    }

    /// A task the store needs while serving (reconnecting, probing), run by
    /// the server until `token` is cancelled.
    fn background(
        self: std::sync::Arc<Self>,
        _token: tokio_util::sync::CancellationToken,
    ) -> Option<BoxFuture<'static, ()>> {
        None
    }
}
