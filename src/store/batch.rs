//! Shared round trips to one Redis node: concurrent requests hand their
//! increments to one task, which sends whatever has queued up as a single
//! script call, with a few calls in flight at once. At low load a batch is one
//! request and nothing waits; under load a round trip carries many requests,
//! so neither sluice nor Redis pays per-request command overhead, and the
//! requests of a batch that hit one counter share one increment
//! ([`coalesce`](super::coalesce)).

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Script;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use super::coalesce::Coalesced;
use super::pool::Manager;
use super::script::{Op, decode};
use crate::limiter::Tally;

/// Keys above which a batch is sent without waiting for more.
const MAX_BATCH_KEYS: usize = 512;
/// Requests that may wait for the batcher before senders are held back.
const QUEUE: usize = 16_384;

type Reply = Result<Vec<Tally>, StoreError>;

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

/// The handle requests use; the batching task stops once every handle is
/// dropped and its batches in flight are answered.
pub(super) struct Batcher {
    tx: mpsc::Sender<Job>,
}

impl Batcher {
    /// Spawns the batching task on the current runtime.
    pub(super) fn start(
        pool: bb8::Pool<Manager>,
        script: Arc<Script>,
        in_flight: usize,
    ) -> Batcher {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drive(rx, pool, script, in_flight.max(1)));
        Batcher { tx }
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
    pool: bb8::Pool<Manager>,
    script: Arc<Script>,
    in_flight: usize,
) {
    let mut sending = FuturesUnordered::new();
    let mut open = true;
    while open || !sending.is_empty() {
        tokio::select! {
            Some(()) = sending.next(), if !sending.is_empty() => {}
            job = rx.recv(), if open && sending.len() < in_flight => match job {
                None => open = false,
                Some(first) => {
                    let mut keys = first.keys();
                    let mut jobs = vec![first];
                    while keys < MAX_BATCH_KEYS {
                        let Ok(job) = rx.try_recv() else { break };
                        keys += job.keys();
                        jobs.push(job);
                    }
                    sending.push(send(pool.clone(), script.clone(), jobs));
                }
            }
        }
    }
}

async fn send(pool: bb8::Pool<Manager>, script: Arc<Script>, jobs: Vec<Job>) {
    let n = jobs.iter().map(|j| j.ops.len()).sum();
    let coalesced = Coalesced::new(jobs.iter().flat_map(|j| &j.ops), n);
    let raw: Result<Vec<i64>, StoreError> = async {
        // Multiplexed: clone the connection and give the slot back at once.
        let mut conn = pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
            .clone();
        let mut inv = script.prepare_invoke();
        coalesced.add_to(&mut inv);
        inv.invoke_async(&mut conn)
            .await
            .map_err(|e| super::redis::classify(&e))
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
                let (mine, tail) = rest.split_at((job.ops.len() * 2).min(rest.len()));
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
