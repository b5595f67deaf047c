//! Where replaced rules are freed: on a thread of their own, once no
//! request holds them. A request that let go of the last reference to the
//! old snapshot would otherwise free every rule (a million take a fraction
//! of a second) on a runtime thread, in the middle of answering, and every
//! request queued behind it on that thread would wait.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// A replaced snapshot (any type, so a test can watch where it is freed).
type Held = Arc<dyn std::any::Any + Send + Sync>;

/// How often held snapshots are looked at again.
const TICK: Duration = Duration::from_millis(2);
/// The longest a snapshot waits for its holders (a quota stream may keep
/// one): past it, the last holder frees it, as before.
const PATIENCE: Duration = Duration::from_secs(10);

/// Snapshots freed here so far, in this process: until one is, every rule
/// it held still counts, and a walk for rules gone finds none.
static RETIRED: AtomicU64 = AtomicU64::new(0);

/// What runs on the retiring thread after it frees snapshots: the binary
/// hands its allocator's purge, so memory the old rules held goes back to
/// the system now rather than at some later allocation (an idle process
/// kept a million rules' worth resident after each reload).
static AFTER_FREEING: OnceLock<fn()> = OnceLock::new();

/// Sets what runs after replaced snapshots are freed (once; later calls
/// change nothing).
pub fn after_freeing(hook: fn()) {
    let _ = AFTER_FREEING.set(hook);
}

/// How many replaced snapshots the retiring thread has let go of.
pub(crate) fn retired() -> u64 {
    RETIRED.load(Relaxed)
}

/// Hands `old` to the retiring thread (started on first use; where it
/// cannot start, `old` is dropped here, on the reload's own thread).
pub(super) fn retire(old: Held) {
    static TX: OnceLock<Option<Sender<Held>>> = OnceLock::new();
    let tx = TX.get_or_init(|| {
        let (tx, rx) = channel();
        // Freeing a million rules takes a core a fraction of a second:
        // behind requests, as the reload that replaced them was.
        crate::background::spawn("sluice-retire", crate::background::LOWEST, move || run(&rx))
            .ok()
            .map(|()| tx)
    });
    if let Some(tx) = tx {
        let _ = tx.send(old);
    }
}

fn run(rx: &Receiver<Held>) {
    let mut held: Vec<(Instant, Held)> = Vec::new();
    loop {
        let wait = if held.is_empty() { PATIENCE } else { TICK };
        match rx.recv_timeout(wait) {
            Ok(old) => held.push((Instant::now(), old)),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let before = held.len();
        held.retain(|(since, old)| Arc::strong_count(old) > 1 && since.elapsed() < PATIENCE);
        if held.len() < before {
            RETIRED.fetch_add((before - held.len()) as u64, Relaxed);
            if let Some(hook) = AFTER_FREEING.get() {
                hook();
            }
        }
    }
}

#[cfg(test)]
#[path = "retire_tests.rs"]
mod tests;
