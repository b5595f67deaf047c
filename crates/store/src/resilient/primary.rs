//! What the safety net needs of the shared store it wraps.

use std::time::Duration;

use crate::demand::{DemandUpdate, MemberDemand};
use crate::limiter::Tally;
use crate::{BoxFuture, Increment, StoreError};

/// The shared store behind the safety net (Redis, or a fake in tests).
pub trait Primary: Send + Sync + 'static {
    /// Counts after the increments, in batch order.
    fn increment<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>>;

    /// Connects afresh and proves that a request would be counted (the
    /// increment script on a probe key), returning how long that call took.
    fn probe(&self) -> BoxFuture<'_, Result<Duration, StoreError>>;

    /// Whether a call to the store has gone unanswered for at least
    /// `at_least`, on a clock that runs on time (the thread that reads the
    /// replies may run late; `workers_late` is how late the workers run
    /// now): what tells a slow store from sluice's own queueing when a
    /// request waited too long. `None` when the store cannot tell.
    fn stalled(&self, _at_least: Duration, _workers_late: Duration) -> Option<bool> {
        None
    }

    /// What the store's clocks said when a wait ran out (how long it has
    /// been silent, how late the thread that reads its replies ran), for
    /// the reason a fault is logged with; `None` when it cannot tell.
    fn hearing(&self, _workers_late: Duration) -> Option<Hearing> {
        None
    }

    /// Whether the store answered some call in the last `within`, a reply
    /// to a request that had given up on it too: a store heard answering
    /// is not silent, however late its answers. `false` when it cannot tell.
    fn answered_within(&self, _within: Duration) -> bool {
        false
    }

    /// Empties the counters of `batch` (their every key: both windows, a
    /// bucket, a concurrency set): an operator's reset.
    fn reset<'a>(&'a self, _batch: &'a [&'a Increment]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable(
            "this store cannot reset counters".into(),
        ))))
    }

    /// `redis` or `redis-cluster`.
    fn backend(&self) -> &'static str;

    /// Where the store is, for logs and `/readyz`; never shows a password.
    fn describe(&self) -> String;

    /// Writes a demand update and reads the table's live members.
    fn demand<'a>(
        &'a self,
        _update: &'a DemandUpdate,
    ) -> BoxFuture<'a, Result<Vec<MemberDemand>, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable(
            "no demand tables in this store".into(),
        ))))
    }
}

/// The evidence behind a wait put down to the store (see
/// [`Primary::hearing`]), in words for its fault's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hearing {
    /// How long a call had gone unanswered with none answered since;
    /// `None` with no call out.
    pub silent: Option<Duration>,
    /// How late the thread that reads the store's replies ran.
    pub reader_late: Duration,
}

impl std::fmt::Display for Hearing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.silent {
            Some(s) => write!(f, "the store silent {} ms", s.as_millis())?,
            None => f.write_str("no call out")?,
        }
        write!(
            f,
            ", its replies read {} ms late",
            self.reader_late.as_millis()
        )
    }
}
