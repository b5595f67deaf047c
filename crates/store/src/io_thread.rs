//! A thread of its own for the Redis connections and the batcher (a
//! Cluster's connections and calls). Under a
//! flood, sluice's workers hold thousands of ready tasks; a Redis reply
//! that must wait behind them at every hop (the connection's task, the
//! batcher's, back to the request) looked like a slow store: a 0.07 ms
//! Redis took 35 to 60 ms as the batcher saw it, and tripped the breaker.
//! On its own thread the round trip is timed by a runtime that has nothing
//! else to run, so a slow reply is evidence about the store.

use std::future::Future;

use std::sync::Arc;
use tokio::runtime::{Builder, Handle};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::StoreError;
use super::lag::Lag;

/// The thread's runtime; the thread ends when this is dropped.
pub(super) struct IoThread {
    handle: Handle,
    /// How late the thread itself runs (the OS may keep it off a core).
    lag: Arc<Lag>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for IoThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IoThread")
    }
}

impl IoThread {
    pub(super) fn start() -> Result<IoThread, StoreError> {
        let rt = Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("redis I/O thread: {e}")))?;
        let handle = rt.handle().clone();
        let lag = Arc::new(Lag::new());
        let watch = lag.clone();
        handle.spawn(async move { watch.watch(CancellationToken::new()).await });
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sluice-redis-io".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| StoreError::Unavailable(format!("redis I/O thread: {e}")))?;
        Ok(IoThread {
            handle,
            lag,
            _stop: stop,
        })
    }

    /// How late the thread runs, lately or now: a reply may have waited
    /// that long in its socket, slowed by this process, not by Redis.
    pub(super) fn late_now(&self) -> std::time::Duration {
        self.lag.late_now()
    }

    /// Spawns `fut` on the I/O thread.
    pub(super) fn spawn<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.handle.spawn(fut)
    }

    /// Runs `fut` on the I/O thread (so whatever it spawns lives there).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.handle
            .spawn(fut)
            .await
            .map_err(|e| StoreError::Unavailable(format!("redis I/O thread: {e}")))?
    }
}
