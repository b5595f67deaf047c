//! Counting in Redis: a batch of increments as script calls (one per
//! cluster slot), and a count whose window Redis's clock is not in made
//! again in Redis's window.
//!
//! Each instance picks a request's window by the clock decisions follow,
//! which is anchored to Redis's ([`crate::limiter::clock`]); near a
//! boundary, or before the anchor caught up with a step of the host's
//! clock, the instance can still name the other window. The script checks
//! every fixed and sliding window against `TIME` and counts none that
//! Redis's clock is not in, so one real window is one key whatever the
//! instances' clocks say: those increments are asked again, once, in the
//! window Redis named (a take for its request's own hits), and answered as
//! [`Tally::Moved`], so nothing local (a lease, the over-limit cache) takes
//! their count for the window asked. A take Redis ran after its caller gave
//! it up counted the request's own hits only, and is answered so too.

use futures_util::future::try_join_all;
use redis::cluster_routing::Slot;

use super::super::script::{Answer, Op};
use super::{Live, RedisStore, classify, decode, render_key, usage_key};
use crate::limiter::{Algorithm, Decision, Now, Tally, Window};
use crate::{Increment, StoreError};

/// The longest a Cluster call holds its permit: a node gone silent
/// (stopped, or its link cut without a close) would otherwise keep every
/// permit its calls hold for as long as it stays silent, and no request
/// could be sent to any node. Twice the silence bound, so a slow node that
/// answers is never cut short.
const CALL_MAX: std::time::Duration = std::time::Duration::from_secs(2);

impl RedisStore {
    /// Runs the script for the batch; tallies come back in batch order.
    pub async fn increment(&self, batch: &[&Increment]) -> Result<Vec<Tally>, StoreError> {
        let answers = self.count(batch).await?;
        let mut tallies = Vec::with_capacity(answers.len());
        let mut again: Vec<(usize, Increment)> = Vec::new();
        for (i, (answer, inc)) in answers.into_iter().zip(batch).enumerate() {
            match answer {
                Answer::Counted(t) => tallies.push(t),
                Answer::Late(n) => tallies.push(Tally::Moved(n)),
                Answer::Elsewhere(start) => {
                    tallies.push(Tally::Decided(Decision::Refuse));
                    again.push((i, in_window(inc, start)));
                }
            }
        }
        if again.is_empty() {
            return Ok(tallies);
        }
        tracing::debug!(
            counts = again.len(),
            "counted in the window of Redis's clock, not the one asked"
        );
        let moved: Vec<&Increment> = again.iter().map(|(_, inc)| inc).collect();
        let answers = self.count(&moved).await?;
        for ((i, _), answer) in again.iter().zip(answers) {
            if let Some(t) = tallies.get_mut(*i) {
                // Asked in the window Redis named: a second miss (a
                // boundary passed between the two calls) is not counted,
                // and a count that never came is a refusal.
                *t = match answer {
                    Answer::Counted(Tally::Count(n)) | Answer::Late(n) => Tally::Moved(n),
                    Answer::Counted(other) => other,
                    Answer::Elsewhere(_) => Tally::Decided(Decision::Refuse),
                };
            }
        }
        Ok(tallies)
    }

    async fn count(&self, batch: &[&Increment]) -> Result<Vec<Answer>, StoreError> {
        let live = self
            .live
            .load_full()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
        let ops: Vec<Op> = batch
            .iter()
            .map(|i| Op::new(i, self.keys(i), Now(i.at_us / 1_000_000)))
            .collect();
        match &*live {
            Live::Single(batcher, _) => {
                let answered = batcher.increment(ops).await;
                if answered.is_err() {
                    // Under a Sentinel, the master is asked again at once.
                    self.failed.notify_one();
                }
                answered
            }
            Live::Cluster(conn) => {
                // One script per slot (a sliding window's two keys share one).
                let mut groups: Vec<(Slot, Vec<usize>, Vec<Op>)> = Vec::new();
                for (i, op) in ops.into_iter().enumerate() {
                    let slot = Slot::for_key(op.keys.first().map_or("", String::as_str));
                    match groups.iter_mut().find(|(s, _, _)| *s == slot) {
                        Some((_, idx, mine)) => {
                            idx.push(i);
                            mine.push(op);
                        }
                        None => groups.push((slot, vec![i], vec![op])),
                    }
                }
                let failed = |e: &dyn std::fmt::Display| {
                    StoreError::Unavailable(format!("cluster call: {e}"))
                };
                let calls = groups.iter_mut().map(|(_, _, mine)| {
                    let ops = std::mem::take(mine);
                    async move {
                        // Waited for here, so a request that gives up
                        // first sends nothing.
                        let permit = self.cluster_permits.clone().acquire_owned().await;
                        let permit = permit.map_err(|e| failed(&e))?;
                        let task = self.cluster_call(conn.clone(), ops, permit);
                        task.await.map_err(|e| failed(&e))?
                    }
                });
                let results = try_join_all(calls).await?;
                let mut answers =
                    vec![Answer::Counted(Tally::Decided(Decision::Refuse)); batch.len()];
                for ((_, idx, _), group) in groups.iter().zip(results) {
                    for (i, answer) in idx.iter().zip(group) {
                        if let Some(a) = answers.get_mut(*i) {
                            *a = answer;
                        }
                    }
                }
                Ok(answers)
            }
        }
    }

    /// One slot's script call on a task of its own, so its reply is read
    /// and recorded ([`Calls`](crate::calls::Calls)) even when the
    /// request that asked has given up on it: a Cluster that answers late
    /// is heard answering. It holds `permit` until answered.
    fn cluster_call(
        &self,
        mut conn: redis::cluster_async::ClusterConnection,
        ops: Vec<Op>,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> tokio::task::JoinHandle<Result<Vec<Answer>, StoreError>> {
        let (script, calls) = (self.script.clone(), self.cluster_calls.clone());
        let task = async move {
            let _permit = permit;
            let call = calls.call();
            let mut inv = script.prepare_invoke();
            for op in &ops {
                op.add_to(&mut inv);
            }
            let raw: Result<Vec<i64>, _> =
                match tokio::time::timeout(CALL_MAX, inv.invoke_async(&mut conn)).await {
                    Ok(raw) => raw,
                    // Dropped unanswered: recorded as given up on.
                    Err(_) => {
                        return Err(StoreError::Unavailable(format!(
                            "a Cluster call unanswered for {} s",
                            CALL_MAX.as_secs()
                        )));
                    }
                };
            call.answered();
            decode(ops.iter().map(Op::kind), &raw.map_err(|e| classify(&e))?)
        };
        // On the I/O thread when there is one, so an answer is recorded
        // when it comes, not after the flood queued on the workers.
        match &self.io {
            Some(io) => io.spawn(task),
            None => tokio::spawn(task),
        }
    }

    /// The Redis keys of one increment: its window's, and for a sliding
    /// window also the previous window's.
    pub(super) fn keys(&self, inc: &Increment) -> Vec<String> {
        let key = |start| {
            render_key(
                &self.config.prefix,
                self.config.key_format,
                &inc.key,
                inc.algorithm,
                start,
                inc.window.period,
            )
        };
        match inc.algorithm {
            Algorithm::FixedWindow => vec![key(inc.window.start.0)],
            Algorithm::SlidingWindow => {
                vec![key(inc.window.start.0), key(inc.window.previous().start.0)]
            }
            Algorithm::TokenBucket { .. } => vec![key(0)],
            // The slots, and the most held at once in the current window.
            Algorithm::Concurrency => {
                let counter = key(0);
                let usage = usage_key(&counter);
                vec![counter, usage]
            }
        }
    }
}

/// `inc` asked in the window of its period that starts at `start`, at that
/// window's first second; a take, for the request's own hits (nothing is
/// leased from a window the instance did not ask for).
fn in_window(inc: &Increment, start: u64) -> Increment {
    Increment {
        window: Window::containing(inc.window.period, Now(start)),
        at_us: start.saturating_mul(1_000_000),
        hits: inc.take.map_or(inc.hits, |t| t.own),
        take: None,
        count_after: false,
        ..inc.clone()
    }
}
