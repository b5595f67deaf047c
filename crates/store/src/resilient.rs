//! The shared store with its safety net: a timeout on every call, a failure
//! policy that decides when the store cannot, a circuit breaker so no request
//! waits on a store known to be down, a background prober that brings it back,
//! and the local over-limit cache in front of it all.

use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Relaxed},
};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

mod after;
mod ahead;
mod blame;
pub(crate) use blame::SILENCE_BOUND;
mod count;
mod late;
mod primary;
mod recovery;
mod reset;

pub use primary::{Hearing, Primary};

use blame::{Blame, Silence};

use super::allowance::Allowance;
use super::breaker::{Breaker, PROBE_MAX, Verdict};
use super::credit::Credit;
use super::demand::{DemandUpdate, Fleet};
use super::lag::Lag;
use super::{
    Answer, BoxFuture, FailurePolicy, Increment, MemoryStore, Occupancy, OverLimitCache, Store,
    StoreError, StoreHealth, expect_counts,
};
use crate::limiter::{Now, Tally};
use crate::observe::{StoreCall, StoreObserver};

/// Why the primary gave no counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Undecided {
    /// The store failed (or is known down): the failure policy decides.
    Store,
    /// sluice could not ask in time while the store was answering: shed.
    Busy,
}

/// Kept from a caller's deadline for the answer to reach it: a policy
/// answer that arrives after Envoy gave up is no answer.
const DEADLINE_MARGIN: Duration = Duration::from_millis(2);

/// How long a store must answer nothing at all, on a clock that runs on
/// time, before a wait that ran out is its fault: longer than a redis-server
/// starved of CPU by a flood on its host goes without answering (measured:
/// a co-located flood left calls unanswered past half of a 20 ms wait and
/// tripped the breaker; it never left Redis silent this long), short beside
/// the silence bound.
pub(crate) const QUIET: Duration = Duration::from_millis(100);

struct Down {
    since: std::time::Instant,
    reason: String,
}

/// The shared store wrapped in timeouts, a failure policy and a breaker.
pub struct Resilient {
    primary: Box<dyn Primary>,
    fallback: MemoryStore,
    cache: OverLimitCache,
    /// Leased allowance of hot counters, and its takes ahead to be sent.
    allowance: Allowance,
    renewals: ahead::Renewals,
    /// Counters answered on credit ([`Credit`]), counted every `count_every`.
    credit: Credit,
    count_every: Duration,
    policy: FailurePolicy,
    timeout: Duration,
    /// The breaker's state, read by every request without a lock.
    open: AtomicBool,
    /// Set by a fault, cleared by the next success: the hot path takes the
    /// breaker's lock only while faults are being seen.
    faulty: AtomicBool,
    /// Set when the store first answers.
    reached: AtomicBool,
    /// Set when the first connection attempt has ended, either way; until
    /// then a request waits for it (within its store wait), not decided by
    /// the policy while the store is not yet dialled; `settle` wakes them.
    settled: AtomicBool,
    settle: Notify,
    breaker: Mutex<Breaker>,
    down: Mutex<Down>,
    wake: Notify,
    observer: Arc<dyn StoreObserver>,
    /// How late the runtime runs tasks lately: a call that waited too long
    /// while it ran late is not the store's fault.
    lag: Arc<Lag>,
    /// How long the store has answered nothing since a wait was put down
    /// to sluice's lateness.
    silence: Silence,
}

/// Settings of the safety net.
#[derive(Debug, Clone, Copy)]
pub struct ResilientOptions {
    pub policy: FailurePolicy,
    /// Longest wait for the store per request (`--redis-timeout`).
    pub timeout: Duration,
    /// Entries of the over-limit cache (`--local-cache-size`).
    pub cache_size: usize,
    /// Counters the memory fallback may hold (`--max-counters`).
    pub max_counters: usize,
    /// Counters that may hold leased allowance (`--allowance-keys`; 0:
    /// leasing off, as `--leased-allowance false`).
    pub allowance_keys: usize,
    /// The largest chunk leased at once (`--allowance-max-chunk`).
    pub allowance_max_chunk: u64,
    /// Leases renewed ahead of running out (`--allowance-ahead`).
    pub allowance_ahead: bool,
    /// `--count-after-keys`, `--count-after-credit` (percent of a limit),
    /// `--count-after-interval`.
    pub count_after_keys: usize,
    pub count_after_credit: u64,
    pub count_after_interval: Duration,
}

impl Resilient {
    /// Starts with the breaker open: requests are decided by the policy until
    /// the background prober has connected.
    pub fn new(
        primary: impl Primary,
        opts: ResilientOptions,
        observer: Arc<dyn StoreObserver>,
    ) -> Resilient {
        observer.circuit(true);
        Resilient {
            primary: Box::new(primary),
            fallback: MemoryStore::with_capacity(opts.max_counters),
            cache: OverLimitCache::new(opts.cache_size),
            allowance: Allowance::new(opts.allowance_keys, opts.allowance_max_chunk)
                .renewing_ahead(opts.allowance_ahead),
            renewals: ahead::Renewals::default(),
            credit: Credit::new(opts.count_after_keys, opts.count_after_credit),
            count_every: opts.count_after_interval,
            policy: opts.policy,
            timeout: opts.timeout,
            open: AtomicBool::new(true),
            faulty: AtomicBool::new(false),
            reached: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            settle: Notify::new(),
            breaker: Mutex::new(Breaker::new()),
            down: Mutex::new(Down {
                since: std::time::Instant::now(),
                reason: "not connected yet".into(),
            }),
            wake: Notify::new(),
            observer,
            lag: Arc::new(Lag::new()),
            silence: Silence::new(),
        }
    }

    async fn ask_primary(
        &self,
        ask: &[&Increment],
        deadline: Option<Instant>,
    ) -> Result<Vec<Tally>, Undecided> {
        self.under_breaker(
            async {
                self.primary
                    .increment(ask)
                    .await
                    .and_then(|counts| expect_counts(counts, ask.len()))
            },
            deadline,
        )
        .await
    }

    /// How long a call may wait: the store timeout, cut to the caller's
    /// deadline (less [`DEADLINE_MARGIN`]) so its answer still reaches it.
    fn wait(&self, deadline: Option<Instant>) -> Duration {
        deadline.map_or(self.timeout, |d| {
            self.timeout.min(
                d.saturating_duration_since(Instant::now())
                    .saturating_sub(DEADLINE_MARGIN),
            )
        })
    }

    /// A request that arrives before the first connection attempt has
    /// ended waits for it, up to its store wait: a store not yet dialled is
    /// not a failing one, so a freshly started instance does not decide by
    /// the policy (and admit past a count the store holds) in its first
    /// milliseconds.
    async fn first_attempt(&self, deadline: Option<Instant>) {
        if self.settled.load(Acquire) {
            return;
        }
        let notified = self.settle.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.settled.load(Acquire) {
            return;
        }
        let _ = tokio::time::timeout(self.wait(deadline), notified).await;
    }

    /// One call to the primary under the breaker and the timeout, its
    /// outcome recorded; `Err` says who decides instead.
    async fn under_breaker<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
        deadline: Option<Instant>,
    ) -> Result<T, Undecided> {
        if self.open.load(Relaxed) {
            self.first_attempt(deadline).await;
            if self.open.load(Relaxed) {
                return Err(Undecided::Store);
            }
        }
        let wait = self.wait(deadline);
        if wait.is_zero() {
            // The caller is gone before the store could answer: the store
            // is not asked, and nothing is counted for nobody.
            self.observer.abandoned();
            return Err(Undecided::Busy);
        }
        let started = Instant::now();
        let result = match tokio::time::timeout(wait, call).await {
            // Waited too long, but no call to the store has, or the runtime
            // itself ran late: the wait was sluice's own (its queue, its
            // CPU), so not the store's fault. A wait inside the call that
            // ran out first (a pool's checkout, on a runtime starved past
            // both timers) is judged the same.
            Ok(Err(StoreError::Timeout)) | Err(_) if self.blame(wait) == Blame::Sluice => {
                if self.observer.shed() {
                    warn!(
                        wait_ms = wait.as_millis(),
                        "a request waited past its store timeout with no sign the store was at fault (sluice's own queue or CPU); shed, not counted against the store (logged once per 10 s)"
                    );
                }
                return Err(Undecided::Busy);
            }
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout),
        };
        self.outcome(result, started.elapsed())
    }

    /// What a finished (or timed-out) store call means: counts to use, or
    /// a fault for the breaker, or this request's own data refused.
    fn outcome<T>(&self, result: Result<T, StoreError>, took: Duration) -> Result<T, Undecided> {
        match result {
            Ok(counts) => {
                self.silence.answered();
                self.observer.store_call(StoreCall::Ok, took);
                if self.faulty.swap(false, Relaxed) {
                    self.breaker.lock().success();
                }
                Ok(counts)
            }
            Err(StoreError::Rejected(reason)) => {
                // This request's own data: decided by the policy, and the
                // store's health is not in question.
                self.silence.answered();
                self.observer.store_call(StoreCall::Rejected, took);
                warn!(reason = %reason, "store refused a counter; this request is decided by --store-failure");
                Err(Undecided::Store)
            }
            Err(StoreError::Busy(_)) => Err(Undecided::Busy),
            Err(e) => {
                let kind = match e {
                    StoreError::Timeout => StoreCall::Timeout,
                    _ => StoreCall::Error,
                };
                self.observer.store_call(kind, took);
                let reason = match e {
                    StoreError::Timeout => self.timeout_reason(),
                    e => e.to_string(),
                };
                self.fault(reason);
                Err(Undecided::Store)
            }
        }
    }
}

impl Store for Resilient {
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        Box::pin(self.count(batch, None))
    }

    fn increment_until<'a>(
        &'a self,
        batch: &'a [Increment],
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        Box::pin(self.count(batch, deadline))
    }

    fn answer<'a>(&'a self, batch: &'a [Increment], deadline: Option<Instant>) -> Answer<'a> {
        self.answer_here(batch, deadline)
    }

    fn reset<'a>(&'a self, batch: &'a [Increment]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.reset_counters(batch))
    }

    fn health(&self) -> StoreHealth {
        self.health_now()
    }

    fn sweep(&self, now: Now) {
        self.fallback.sweep(now);
        self.cache.sweep(now);
        let stranded = self.allowance.sweep(now);
        if stranded > 0 {
            self.observer.allowance_stranded(stranded);
        }
        let doubt = self.credit.sweep(now);
        if doubt > 0 {
            self.observer.credit_in_doubt(doubt);
        }
    }

    fn counters(&self) -> Occupancy {
        self.fallback.stats()
    }

    fn background(self: Arc<Self>, token: CancellationToken) -> Option<BoxFuture<'static, ()>> {
        let lag = self.lag.clone();
        let watch = token.clone();
        let late = token.clone();
        let renew = token.clone();
        let after = token.clone();
        Some(Box::pin(async move {
            tokio::join!(
                self.clone().count_late(late),
                self.clone().renewer(renew),
                self.clone().settler(after),
                self.probe(token),
                lag.watch(watch)
            );
        }))
    }

    fn demand<'a>(&'a self, update: &'a DemandUpdate) -> BoxFuture<'a, Fleet> {
        Box::pin(async move {
            if let Ok(members) = self.under_breaker(self.primary.demand(update), None).await {
                return Fleet::Members(members);
            }
            let policy = update.on_failure.unwrap_or(self.policy);
            self.observer.policy_decisions(policy.name(), 1);
            match policy {
                FailurePolicy::Fallback => self.fallback.demand(update).await,
                FailurePolicy::Allow => Fleet::Allow,
                FailurePolicy::Deny => Fleet::Deny,
            }
        })
    }
}

#[cfg(test)]
#[path = "resilient_tests.rs"]
mod tests;
