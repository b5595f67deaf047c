//! The shared store with its safety net: a timeout on every call, a failure
//! policy that decides when the store cannot, a circuit breaker so no request
//! waits on a store known to be down, a background prober that brings it back,
//! and the local over-limit cache in front of it all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::redis::RedisStore;
use super::{BoxFuture, Increment, MemoryStore, OverLimitCache, Store, StoreError, StoreHealth};
use crate::limiter::Now;
use crate::metrics::{Metrics, StoreCall};

/// Consecutive failed calls that mean "down" rather than "one slow reply".
const TRIP_AFTER: u32 = 5;
const PROBE_FIRST: Duration = Duration::from_millis(50);
const PROBE_MAX: Duration = Duration::from_secs(2);

/// What decides a request the shared store could not count (`--store-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FailurePolicy {
    /// Count in this process's memory: limits stay enforced per instance.
    #[default]
    Fallback,
    /// Admit.
    Allow,
    /// Answer OVER_LIMIT.
    Deny,
}

impl FailurePolicy {
    pub fn name(self) -> &'static str {
        match self {
            FailurePolicy::Fallback => "fallback",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Deny => "deny",
        }
    }

    fn in_use(self) -> &'static str {
        match self {
            FailurePolicy::Fallback => "memory-fallback",
            FailurePolicy::Allow => "allow-all",
            FailurePolicy::Deny => "deny-all",
        }
    }
}

struct Down {
    since: Instant,
    reason: String,
}

/// The Redis store wrapped in timeouts, a failure policy and a breaker.
pub struct Resilient {
    primary: RedisStore,
    fallback: MemoryStore,
    cache: OverLimitCache,
    policy: FailurePolicy,
    timeout: Duration,
    open: AtomicBool,
    failures: AtomicU32,
    down: Mutex<Down>,
    wake: Notify,
    metrics: Arc<Metrics>,
}

impl Resilient {
    /// Starts with the breaker open: requests are decided by the policy until
    /// the background prober has connected.
    pub fn new(
        primary: RedisStore,
        policy: FailurePolicy,
        timeout: Duration,
        cache_size: usize,
        metrics: Arc<Metrics>,
    ) -> Resilient {
        metrics.circuit(true);
        Resilient {
            primary,
            fallback: MemoryStore::default(),
            cache: OverLimitCache::new(cache_size),
            policy,
            timeout,
            open: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            down: Mutex::new(Down {
                since: Instant::now(),
                reason: "not connected yet".into(),
            }),
            wake: Notify::new(),
            metrics,
        }
    }

    async fn count(&self, batch: &[Increment]) -> Vec<u64> {
        let cached: Vec<Option<u64>> = batch.iter().map(|inc| self.cache.over(inc)).collect();
        let ask: Vec<&Increment> = batch
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|(inc, _)| inc)
            .collect();
        let hits = batch.len() - ask.len();
        if hits > 0 {
            self.metrics.local_cache_hits(hits as u64);
        }
        let got = if ask.is_empty() {
            Vec::new()
        } else {
            match self.ask_primary(&ask).await {
                Ok(got) => {
                    for (inc, c) in ask.iter().zip(&got) {
                        self.cache.record(inc, *c);
                    }
                    got
                }
                Err(()) => self.by_policy(&ask),
            }
        };
        // Answers from the store fill the gaps the cache left, in order.
        let mut got = got.into_iter();
        cached
            .into_iter()
            .map(|c| c.unwrap_or_else(|| got.next().unwrap_or(0)))
            .collect()
    }

    async fn ask_primary(&self, ask: &[&Increment]) -> Result<Vec<u64>, ()> {
        if self.open.load(Relaxed) {
            return Err(());
        }
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, self.primary.increment(ask)).await;
        let took = started.elapsed();
        match result {
            Ok(Ok(counts)) => {
                self.metrics.store_call(StoreCall::Ok, took);
                self.failures.store(0, Relaxed);
                Ok(counts)
            }
            Ok(Err(e)) => {
                self.metrics.store_call(StoreCall::Error, took);
                self.failed(e.to_string());
                Err(())
            }
            Err(_) => {
                self.metrics.store_call(StoreCall::Timeout, took);
                self.failed(format!("no answer within {} ms", self.timeout.as_millis()));
                Err(())
            }
        }
    }

    fn by_policy(&self, ask: &[&Increment]) -> Vec<u64> {
        self.metrics
            .policy_decisions(self.policy.name(), ask.len() as u64);
        match self.policy {
            FailurePolicy::Fallback => self.fallback.increment_now(ask.iter().copied()),
            FailurePolicy::Allow => vec![0; ask.len()],
            // Over by exactly the hits, so over-limit metrics stay truthful.
            FailurePolicy::Deny => ask
                .iter()
                .map(|i| u64::from(i.limit) + i.hits.max(1))
                .collect(),
        }
    }

    fn failed(&self, reason: String) {
        let n = self.failures.fetch_add(1, Relaxed) + 1;
        if n >= TRIP_AFTER && !self.open.swap(true, Relaxed) {
            error!(
                store = %self.primary.target(),
                reason = %reason,
                policy = self.policy.name(),
                "store down after {n} consecutive failures; deciding by --store-failure {} until it answers again",
                self.policy.name()
            );
            *self.down.lock() = Down {
                since: Instant::now(),
                reason,
            };
            self.metrics.circuit(true);
            self.wake.notify_one();
        }
    }

    /// Waits for the breaker to open, then reconnects with backoff until the
    /// store answers; repeats until cancelled.
    async fn probe(self: Arc<Self>, token: CancellationToken) {
        let mut first = true;
        loop {
            while !self.open.load(Relaxed) {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = token.cancelled() => return,
                }
            }
            let mut backoff = Duration::ZERO;
            loop {
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = token.cancelled() => return,
                }
                let attempt = tokio::time::timeout(PROBE_MAX, self.primary.connect()).await;
                // A Redis that answers, but slower than a request may wait,
                // is still down: taking it back would only fail every request
                // again after a full timeout each.
                let attempt = attempt.unwrap_or(Err(StoreError::Timeout)).and_then(|rtt| {
                    if rtt > self.timeout {
                        Err(StoreError::Unavailable(format!(
                            "PING took {} ms, more than --redis-timeout {} ms",
                            rtt.as_millis(),
                            self.timeout.as_millis()
                        )))
                    } else {
                        Ok(())
                    }
                });
                match attempt {
                    Ok(()) => {
                        let down_for = self.down.lock().since.elapsed();
                        self.failures.store(0, Relaxed);
                        self.open.store(false, Relaxed);
                        self.metrics.circuit(false);
                        if first {
                            info!(store = %self.primary.target(), "store connected");
                        } else {
                            info!(store = %self.primary.target(), down_seconds = down_for.as_secs_f64(), "store back; counting in it again");
                        }
                        break;
                    }
                    Err(e) => {
                        let mut down = self.down.lock();
                        if first && backoff.is_zero() {
                            error!(store = %self.primary.target(), reason = %e, policy = self.policy.name(), "store unreachable at startup; deciding by --store-failure {} and retrying", self.policy.name());
                        }
                        down.reason = e.to_string();
                    }
                }
                backoff = (backoff * 2).clamp(PROBE_FIRST, PROBE_MAX);
            }
            first = false;
        }
    }
}

impl Store for Resilient {
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<u64>, StoreError>> {
        Box::pin(async move { Ok(self.count(batch).await) })
    }

    fn health(&self) -> StoreHealth {
        if !self.open.load(Relaxed) {
            return StoreHealth {
                backend: self.primary.backend(),
                in_use: self.primary.backend(),
                healthy: true,
                detail: None,
            };
        }
        let down = self.down.lock();
        StoreHealth {
            backend: self.primary.backend(),
            in_use: self.policy.in_use(),
            healthy: false,
            detail: Some(format!(
                "{} {} unreachable for {:.1}s: {}; deciding by --store-failure {}",
                self.primary.backend(),
                self.primary.target(),
                down.since.elapsed().as_secs_f64(),
                down.reason,
                self.policy.name()
            )),
        }
    }

    fn sweep(&self, now: Now) {
        self.fallback.sweep(now);
        self.cache.sweep(now);
    }

    fn background(self: Arc<Self>, token: CancellationToken) -> Option<BoxFuture<'static, ()>> {
        Some(Box::pin(self.probe(token)))
    }
}
