//! Hot reload: one task owns every trigger (file events, SIGHUP, a metadata
//! poll) and is the only writer of the live rules, so reloads never overlap.
//!
//! The directory itself is watched recursively, so in-place writes, editors'
//! rename-over saves, new and deleted files and Kubernetes' `..data` symlink
//! swaps are all seen. Bursts of events are debounced into one reload. The
//! poll catches what a watcher can miss (the directory replaced, network
//! filesystems) at the cost of one `stat` per file every few seconds.
//!
//! It is sluice's one file watcher: what else is kept from files (the gRPC
//! listener's TLS certificates) it asks every second to read them again
//! when their [stamp](crate::stamp) changed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{LiveRules, stat_fingerprint};
use crate::stamp::Refresh;

/// Quiet time that ends a burst of events.
const QUIET: Duration = Duration::from_millis(100);
/// Longest a burst can delay a reload.
const MAX_DELAY: Duration = Duration::from_millis(400);
/// How often the directory's metadata is compared.
const POLL: Duration = Duration::from_secs(2);
/// How often the other watched files are asked to refresh.
const REFRESH: Duration = Duration::from_secs(1);

/// The reload triggers, registered up front so that nothing that happens
/// after startup is missed: a SIGHUP reloads instead of killing the process,
/// and an edit made right after startup is seen.
pub struct Watch {
    rules: Arc<LiveRules>,
    files: bool,
    hup: Hup,
    tx: mpsc::Sender<()>,
    events: mpsc::Receiver<()>,
    watcher: Option<notify::RecommendedWatcher>,
    others: Vec<Arc<dyn Refresh>>,
}

impl Watch {
    /// Registers SIGHUP and, when `files` is set, a watcher on the rules'
    /// directory. Call it before announcing readiness.
    pub fn start(rules: Arc<LiveRules>, files: bool) -> Watch {
        let (tx, events) = mpsc::channel::<()>(64);
        let watcher = if files {
            start_watcher(rules.dir(), tx.clone())
        } else {
            None
        };
        Watch {
            rules,
            files,
            hup: sighup(),
            tx,
            events,
            watcher,
            others: Vec::new(),
        }
    }

    /// Also keeps `other` fresh (every second, on a blocking thread).
    pub(crate) fn refreshing(mut self, other: Arc<dyn Refresh>) -> Watch {
        self.others.push(other);
        self
    }

    /// Reloads on every trigger until `token` is cancelled.
    pub async fn run(mut self, token: CancellationToken) {
        let dir = self.rules.dir().to_path_buf();
        let mut poll = tokio::time::interval(POLL);
        let mut refresh = tokio::time::interval(REFRESH);
        loop {
            let cause = tokio::select! {
                () = token.cancelled() => return,
                _ = refresh.tick(), if !self.others.is_empty() => {
                    let others = self.others.clone();
                    let done = tokio::task::spawn_blocking(move || others.iter().for_each(|o| o.refresh()));
                    tokio::select! {
                        () = token.cancelled() => return,
                        _ = done => continue,
                    }
                }
                Some(()) = self.events.recv() => {
                    debounce(&mut self.events).await;
                    "file change"
                }
                Some(()) = recv_hup(&mut self.hup) => "SIGHUP",
                _ = poll.tick(), if self.files => {
                    if self.watcher.is_none() {
                        self.watcher = start_watcher(&dir, self.tx.clone());
                    }
                    // Walking the directory is file I/O: keep it off the runtime.
                    let (d, rules) = (dir.clone(), self.rules.clone());
                    let max = rules.options().max_files;
                    let changed = tokio::task::spawn_blocking(move || stat_fingerprint(&d, max) != rules.stat_seen());
                    tokio::select! {
                        () = token.cancelled() => return,
                        changed = changed => if !changed.unwrap_or(false) {
                            continue;
                        },
                    }
                    "poll"
                }
            };
            // Logging and metrics happen inside reload; the outcome is not
            // needed here. Shutdown does not wait for a reload in progress:
            // it is left to finish on its thread while the process exits.
            let reload = reload_behind(self.rules.clone(), cause);
            tokio::select! {
                () = token.cancelled() => return,
                _ = reload => {}
            }
        }
    }
}

/// Runs a reload on a thread of its own at a lower CPU priority: see
/// [`behind`]. `None` when the thread could not be started.
pub async fn reload_behind(
    rules: Arc<LiveRules>,
    cause: &'static str,
) -> Option<Result<super::Reload, super::LoadError>> {
    let nice = rules.options().reload_nice;
    behind(nice, move || rules.reload(cause)).await
}

/// Runs `work` (loading and compiling rules) on a thread of its own at a
/// lower CPU priority (`nice`, 10 unless `--reload-nice` says; see
/// [`crate::background`]): the old rules answer, at their usual speed,
/// until the new ones are whole. `None` when the thread could not be started or ended without
/// an answer.
pub async fn behind<T: Send + 'static>(
    nice: u8,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = crate::background::spawn("sluice-reload", nice, move || {
        let _ = tx.send(work());
    });
    if spawned.is_err() {
        return None;
    }
    rx.await.ok()
}

async fn debounce(events: &mut mpsc::Receiver<()>) {
    let deadline = Instant::now() + MAX_DELAY;
    while Instant::now() < deadline {
        match timeout(QUIET, events.recv()).await {
            Ok(Some(())) => continue,
            _ => return,
        }
    }
}

fn start_watcher(dir: &Path, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            // A full queue already holds a pending reload: dropping is fine.
            let _ = tx.try_send(());
        }
    };
    let result = notify::recommended_watcher(handler).and_then(|mut w| {
        w.watch(dir, RecursiveMode::Recursive)?;
        Ok(w)
    });
    match result {
        Ok(w) => {
            info!(dir = %dir.display(), "watching the config directory");
            Some(w)
        }
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot watch the config directory; polling every {}s", POLL.as_secs());
            None
        }
    }
}

/// A SIGHUP listener (none where signals do not exist).
#[cfg(unix)]
type Hup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hup = Option<()>;

#[cfg(unix)]
fn sighup() -> Hup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}
#[cfg(not(unix))]
fn sighup() -> Hup {
    None
}

#[cfg(unix)]
async fn recv_hup(hup: &mut Hup) -> Option<()> {
    match hup {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
#[cfg(not(unix))]
async fn recv_hup(_: &mut Hup) -> Option<()> {
    std::future::pending().await
}
