//! Shared round trips to one Redis node: concurrent requests hand their
//! increments to one task, which sends whatever has queued up as a single
//! script call, with a few calls in flight at once. At low load a batch is one
//! request and nothing waits; under load a round trip carries many requests,
//! so neither sluice nor Redis pays per-request command overhead, and the
//! requests of a batch that hit one counter share one increment
//! ([`coalesce`](super::coalesce)).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Script;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::StoreError;
use super::coalesce::Coalesced;
use super::pool::{Manager, Pooled};
use super::script::{ANSWERS, Answer, Op, decode};

/// Keys above which a batch is sent without waiting for more.
const MAX_BATCH_KEYS: usize = 512;
/// Requests that may wait for the batcher before senders are held back.
const QUEUE: usize = 16_384;

type Reply = Result<Vec<Answer>, StoreError>;

/// One request's part of a batch.
struct Job {
    ops: Vec<Op>,
    reply: oneshot::Sender<Reply>,
}

impl Job {
    fn keys(&self) -> usize {
        self.ops.iter().map(|o| o.keys.len()).sum()
    }
}

/// When each script call in flight was sent, and when the store last
/// answered one, so a request that waited too long can tell a store that
/// answers nothing (a call unanswered for the whole wait, and no other
/// answered meanwhile) from one that is slow but answering (starved of CPU
/// on a loaded host) and from sluice's own queueing (no call waited).
pub(super) struct Sends {
    base: Instant,
    /// Milliseconds after `base`, plus one, of each slot's call; 0 is free.
    slots: Box<[AtomicU64]>,
    /// Milliseconds after `base`, plus one, of the last call answered.
    answered_at: AtomicU64,
}

impl Sends {
    fn new(n: usize) -> Sends {
        Sends {
            base: Instant::now(),
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            answered_at: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn sent(&self, slot: usize) {
        if let Some(s) = self.slots.get(slot) {
            s.store(self.now_ms() + 1, Relaxed);
        }
    }

    fn answered(&self, slot: usize) {
        if let Some(s) = self.slots.get(slot) {
            s.store(0, Relaxed);
        }
        self.answered_at.store(self.now_ms() + 1, Relaxed);
    }

    /// Whether the store answered some call in the last `within`.
    fn answered_within(&self, within: Duration) -> bool {
        let at = self.answered_at.load(Relaxed);
        let within = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        at != 0 && self.now_ms().saturating_sub(at - 1) < within
    }

    /// Whether the store is silent: some call has been unanswered for at
    /// least `wait`, and no call was answered in that time either.
    pub(super) fn stalled(&self, wait: Duration) -> bool {
        self.silence().is_some_and(|s| s >= wait)
    }

    /// How long the store has been silent with a call out: the oldest
    /// call's age, or the time since the last answer if that is shorter
    /// (an answer since a call was sent means the store is answering);
    /// `None` with no call out.
    pub(super) fn silence(&self) -> Option<Duration> {
        let now = self.now_ms();
        let answered = self.answered_at.load(Relaxed).saturating_sub(1);
        let silent = self.slots.iter().filter_map(|s| {
            let at = s.load(Relaxed);
            (at != 0).then(|| now.saturating_sub((at - 1).max(answered)))
        });
        silent.max().map(Duration::from_millis)
    }
}

/// The handle requests use; the batching task stops once every handle is
/// dropped and its batches in flight are answered.
pub(super) struct Batcher {
    tx: mpsc::Sender<Job>,
    sends: Arc<Sends>,
}

impl Batcher {
    /// Spawns the batching task on the current runtime.
    pub(super) fn start(pool: Pooled<Manager>, script: Arc<Script>, in_flight: usize) -> Batcher {
        let (tx, rx) = mpsc::channel(QUEUE);
        let sends = Arc::new(Sends::new(in_flight.max(1)));
        tokio::spawn(drive(rx, pool, script, sends.clone()));
        Batcher { tx, sends }
    }

    /// Whether a script call has gone unanswered for at least `wait`.
    pub(super) fn stalled(&self, wait: Duration) -> bool {
        self.sends.stalled(wait)
    }

    /// How long Redis has been silent with a script call out.
    pub(super) fn silence(&self) -> Option<Duration> {
        self.sends.silence()
    }

    /// Whether Redis answered some script call in the last `within`.
    pub(super) fn answered_within(&self, within: Duration) -> bool {
        self.sends.answered_within(within)
    }

    /// Tallies of the increments, in `ops` order.
    pub(super) async fn increment(&self, ops: Vec<Op>) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job { ops, reply })
            .await
            .map_err(|_| StoreError::Unavailable("redis batcher stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("redis batch dropped".into()))?
    }
}

async fn drive(
    mut rx: mpsc::Receiver<Job>,
    pool: Pooled<Manager>,
    script: Arc<Script>,
    sends: Arc<Sends>,
) {
    let mut sending = FuturesUnordered::new();
    let mut free: Vec<usize> = (0..sends.slots.len()).collect();
    let mut open = true;
    while open || !sending.is_empty() {
        tokio::select! {
            Some(slot) = sending.next(), if !sending.is_empty() => {
                sends.answered(slot);
                free.push(slot);
            }
            job = rx.recv(), if open && !free.is_empty() => match job {
                None => open = false,
                Some(first) => {
                    let jobs = gather(first, &mut rx);
                    if jobs.is_empty() {
                        continue;
                    }
                    let Some(slot) = free.pop() else { continue };
                    sends.sent(slot);
                    let call = send(pool.clone(), script.clone(), jobs);
                    sending.push(async move {
                        call.await;
                        slot
                    });
                }
            }
        }
    }
}

/// `first` and whatever else has queued, up to [`MAX_BATCH_KEYS`], without
/// the jobs whose caller has gone (reset, or past its deadline): work nobody
/// waits for never reaches the store.
fn gather(first: Job, rx: &mut mpsc::Receiver<Job>) -> Vec<Job> {
    let mut keys = 0;
    let mut jobs = Vec::new();
    let mut next = Some(first);
    while let Some(job) = next.take() {
        if !job.reply.is_closed() {
            keys += job.keys();
            jobs.push(job);
        }
        if keys >= MAX_BATCH_KEYS {
            break;
        }
        next = rx.try_recv().ok();
    }
    jobs
}

async fn send(pool: Pooled<Manager>, script: Arc<Script>, jobs: Vec<Job>) {
    let n = jobs.iter().map(|j| j.ops.len()).sum();
    let coalesced = Coalesced::new(jobs.iter().flat_map(|j| &j.ops), n);
    let raw: Result<Vec<i64>, StoreError> = async {
        // Multiplexed: clone the connection and give the slot back at once.
        let mut conn = pool.get().await?.clone();
        let mut inv = script.prepare_invoke();
        coalesced.add_to(&mut inv);
        inv.invoke_async(&mut conn)
            .await
            .map_err(|e| super::pool::classify(&e))
    }
    .await
    // A reply that does not match the call is the store's fault: nobody is
    // answered from it, so no request is admitted on a missing count.
    .and_then(|raw: Vec<i64>| coalesced.answers(&raw));
    drop(coalesced);
    match raw {
        Ok(raw) => {
            let mut rest = raw.as_slice();
            for job in jobs {
                let (mine, tail) = rest.split_at((job.ops.len() * ANSWERS).min(rest.len()));
                rest = tail;
                // Each request gets its own tallies, or its own error: one
                // request's refused counter never fails the others.
                // A request that timed out has gone; nothing to tell it.
                let _ = job.reply.send(decode(job.ops.iter().map(Op::kind), mine));
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
}
