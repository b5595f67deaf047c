//! An operator's reset through the safety net: what this instance remembers
//! (its over-limit cache, the fallback's counts) is emptied first, then the
//! shared store's counters, within a wait of their own.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Resilient;
use crate::{Increment, StoreError};

/// The least a reset may wait for the store: it is an operator's call, not
/// a request on the hot path, so a short `--redis-timeout` does not cut it.
const RESET_WAIT: Duration = Duration::from_secs(2);

impl Resilient {
    pub(super) async fn reset_counters(&self, batch: &[Increment]) -> Result<(), StoreError> {
        for inc in batch {
            self.cache.forget(&inc.key);
            self.allowance.forget(&inc.key);
            self.credit.forget(&inc.key);
        }
        self.fallback.reset(batch);
        if self.open.load(Relaxed) {
            return Err(StoreError::Unavailable(format!(
                "{} is down; only this instance's fallback counters were reset",
                self.primary.backend()
            )));
        }
        let refs: Vec<&Increment> = batch.iter().collect();
        tokio::time::timeout(self.timeout.max(RESET_WAIT), self.primary.reset(&refs))
            .await
            .unwrap_or(Err(StoreError::Timeout))
    }
}
