//! Counter stores behind one small trait: each increments a batch of fixed-window
//! counters and returns the counts after the increment, atomically per counter.

mod batch;
mod cache;
mod key;
mod memory;
pub mod redis;
mod resilient;

use std::future::Future;
use std::pin::Pin;

pub use cache::OverLimitCache;
pub use key::CounterKey;
pub use memory::MemoryStore;
pub use resilient::{FailurePolicy, Resilient};

use crate::limiter::Window;

/// A boxed future, so stores can sit behind `dyn Store`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Add `hits` to the counter `key` of `window`.
#[derive(Debug, Clone)]
pub struct Increment {
    pub key: CounterKey,
    pub hits: u64,
    /// The limit the count will be held against (for the over-limit cache).
    pub limit: u32,
    pub window: Window,
}

/// Why a store could not count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store timed out")]
    Timeout,
    #[error("store unavailable: {0}")]
    Unavailable(String),
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
    pub detail: Option<String>,
}

/// A place where counters live.
pub trait Store: Send + Sync + 'static {
    /// Increments every counter of the batch and returns the counts after, in
    /// batch order. `now` is the second the decision is made at.
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<u64>, StoreError>>;

    fn health(&self) -> StoreHealth;

    /// Periodic housekeeping, such as freeing ended windows.
    fn sweep(&self, _now: crate::limiter::Now) {}

    /// A task the store needs while serving (reconnecting, probing), run by
    /// the server until `token` is cancelled.
    fn background(
        self: std::sync::Arc<Self>,
        _token: tokio_util::sync::CancellationToken,
    ) -> Option<BoxFuture<'static, ()>> {
        None
    }
}
