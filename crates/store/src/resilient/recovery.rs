//! How the safety net learns the store is down and proves it back: faults
//! trip the breaker, and the prober counts a probe key with backoff until the
//! store answers within the time a request may wait.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, Release};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::{Down, PROBE_MAX, Resilient, Verdict};
use crate::{StoreError, StoreHealth};

/// Bytes of a store's reason kept for the log and `/readyz` (Redis's own
/// protected-mode refusal is about 1,100).
const REASON_BYTES: usize = 2048;

impl Resilient {
    pub(super) fn fault(&self, mut reason: String) {
        // The store's words, but not without bound: a hostile or broken
        // store could answer an error line of any length.
        crate::text::cut(&mut reason, REASON_BYTES);
        self.faulty.store(true, Relaxed);
        let mut breaker = self.breaker.lock();
        if breaker.fault(Instant::now()) != Verdict::Tripped {
            return;
        }
        self.open.store(true, Relaxed);
        self.observer.circuit_trip(breaker.trips());
        drop(breaker);
        error!(
            store = %self.primary.describe(),
            reason = %reason,
            policy = self.policy.name(),
            "store down after consecutive failures; deciding by --store-failure {} until it answers again",
            self.policy.name()
        );
        *self.down.lock() = Down {
            since: std::time::Instant::now(),
            reason,
        };
        self.observer.circuit(true);
        self.wake.notify_one();
    }

    /// One recovery attempt: the store must count a probe key, within the
    /// time a request may wait.
    async fn try_recover(&self) -> Result<(), StoreError> {
        let rtt = tokio::time::timeout(PROBE_MAX, self.primary.probe())
            .await
            .unwrap_or(Err(StoreError::Timeout))?;
        // A store that answers, but slower than a request may wait, is still
        // down: taking it back would only fail every request again. (Time
        // the runtime ran late is not the store's.)
        if rtt.saturating_sub(self.lag.recent()) > self.timeout {
            return Err(StoreError::Unavailable(format!(
                "probe took {} ms, more than --redis-timeout {} ms",
                rtt.as_millis(),
                self.timeout.as_millis()
            )));
        }
        Ok(())
    }

    /// Waits for the breaker to open, then probes with backoff until the
    /// store counts again; repeats until cancelled.
    pub(super) async fn probe(self: Arc<Self>, token: CancellationToken) {
        let mut first = true;
        loop {
            while !self.open.load(Relaxed) {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = token.cancelled() => return,
                }
            }
            let mut logged = false;
            loop {
                let delay = self.breaker.lock().next_delay();
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = token.cancelled() => return,
                }
                let outcome = self.try_recover().await;
                match outcome {
                    Ok(()) => self.recovered(first),
                    Err(ref e) => self.still_down(e, first && !logged),
                }
                if first && !self.settled.swap(true, Release) {
                    self.settle.notify_waiters();
                }
                if outcome.is_ok() {
                    break;
                }
                logged = true;
            }
            first = false;
        }
    }

    /// A failed recovery probe: logged at startup, and again only when the
    /// store's reason changes (a refused port that starts answering
    /// `DENIED`), so the log says each cause once in the store's own words.
    fn still_down(&self, e: &StoreError, at_startup: bool) {
        let mut reason = e.to_string();
        crate::text::cut(&mut reason, REASON_BYTES);
        let changed = {
            let mut down = self.down.lock();
            let changed = down.reason != reason;
            down.reason.clone_from(&reason);
            changed
        };
        let (store, policy) = (self.primary.describe(), self.policy.name());
        if at_startup {
            error!(store = %store, reason = %reason, policy, "store unreachable at startup; deciding by --store-failure {policy} and retrying");
        } else if changed {
            warn!(store = %store, reason = %reason, policy, "store still down, now for this reason; deciding by --store-failure {policy}");
        }
    }

    fn recovered(&self, first: bool) {
        let down_for = self.down.lock().since.elapsed();
        self.faulty.store(false, Relaxed);
        self.reached.store(true, Relaxed);
        self.breaker.lock().close(Instant::now());
        self.open.store(false, Relaxed);
        self.observer.circuit(false);
        if first {
            info!(store = %self.primary.describe(), "store connected");
        } else {
            info!(store = %self.primary.describe(), down_seconds = down_for.as_secs_f64(), "store back; counting in it again");
        }
    }

    /// Up, or down since when, why, and what decides meanwhile.
    pub(super) fn health_now(&self) -> StoreHealth {
        if !self.open.load(Relaxed) {
            return StoreHealth {
                backend: self.primary.backend(),
                in_use: self.primary.backend(),
                healthy: true,
                reached: true,
                detail: None,
            };
        }
        let down = self.down.lock();
        StoreHealth {
            backend: self.primary.backend(),
            in_use: self.policy.in_use(),
            healthy: false,
            reached: self.reached.load(Relaxed),
            detail: Some(format!(
                "{} {} unreachable for {:.1}s: {}; deciding by --store-failure {}",
                self.primary.backend(),
                self.primary.describe(),
                down.since.elapsed().as_secs_f64(),
                down.reason,
                self.policy.name()
            )),
        }
    }
}
