//! Counter stores behind one small trait: each increments a batch of fixed-window
//! counters and returns the counts after the increment, atomically per counter.

mod key;
mod memory;

use std::future::Future;
use std::pin::Pin;

pub use key::CounterKey;
pub use memory::MemoryStore;

use crate::limiter::Window;

/// A boxed future, so stores can sit behind `dyn Store`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Add `hits` to the counter `key` of `window`.
#[derive(Debug, Clone)]
pub struct Increment {
    pub key: CounterKey,
    pub hits: u64,
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
    pub backend: &'static str,
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
}
