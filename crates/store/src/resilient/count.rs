//! One batch through the safety net: each increment is answered from this
//! instance's leased allowance, or from the over-limit cache, or asked of
//! the store (a hot counter's by taking a chunk), or decided by the failure
//! policy when the store cannot count.

use tokio::time::Instant;

use super::{Resilient, Undecided};
use crate::allowance::Plan;
use crate::limiter::{Decision, Now, Tally, clock};
use crate::{Answer, FailurePolicy, Increment, StoreError, Take};

/// How one increment of a batch goes.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Answered from this instance's lease.
    Leased(Tally),
    /// Answered over its limit from the over-limit cache.
    Cached(Tally),
    /// Answered on credit, counted in the store after.
    Credited(Tally),
    /// Asked of the store: for its own hits, or a chunk to lease.
    Ask(Option<u64>),
}

impl Resilient {
    /// What this instance answers without the store, or how to ask it.
    fn step(&self, inc: &Increment) -> Step {
        let plan = self.allowance.plan(inc);
        match plan {
            Plan::Served(t) => return Step::Leased(t),
            Plan::Ahead(t, chunk) => {
                self.renew_ahead(inc, chunk);
                return Step::Leased(t);
            }
            _ => {}
        }
        // Behind a take in flight, a refusal waits for the take's lease
        // (`Allowance::behind_take`), so none is remembered.
        if plan != Plan::Behind
            && let Some(t) = self.cache.over(inc)
        {
            if let Plan::Take { .. } = plan {
                self.allowance.abandon(inc);
            }
            return Step::Cached(t);
        }
        // On credit only while the store is thought up: a store known down
        // is the failure policy's to decide.
        if !self.open.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(t) = self.credit.admit(inc)
        {
            if let Plan::Take { .. } = plan {
                self.allowance.abandon(inc);
            }
            return Step::Credited(t);
        }
        match plan {
            Plan::Take { chunk } => Step::Ask(Some(chunk)),
            _ => Step::Ask(None),
        }
    }

    pub(super) async fn count(
        &self,
        batch: &[Increment],
        deadline: Option<Instant>,
    ) -> Result<Vec<Tally>, StoreError> {
        let steps: Vec<Step> = batch.iter().map(|inc| self.step(inc)).collect();
        self.finish(batch, steps, deadline).await
    }

    /// `batch` answered at once when each increment is answered here
    /// (its steps taken once: a lease's position is spent by the step),
    /// else the call that asks the store for the rest.
    pub(super) fn answer_here<'a>(
        &'a self,
        batch: &'a [Increment],
        deadline: Option<Instant>,
    ) -> Answer<'a> {
        let steps: Vec<Step> = batch.iter().map(|inc| self.step(inc)).collect();
        if steps.iter().any(|s| matches!(s, Step::Ask(_))) {
            return Answer::Later(Box::pin(self.finish(batch, steps, deadline)));
        }
        self.observe(&steps, 0);
        Answer::Now(Ok(steps
            .into_iter()
            .map(|s| match s {
                Step::Leased(t) | Step::Cached(t) | Step::Credited(t) => t,
                Step::Ask(_) => Tally::Decided(Decision::Refuse),
            })
            .collect()))
    }

    /// The rest of [`Resilient::count`] once each increment's step is
    /// known: the store asked for what was not answered here.
    async fn finish(
        &self,
        batch: &[Increment],
        steps: Vec<Step>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Tally>, StoreError> {
        // A take asks for the chunk in the request's place; only takes are
        // copied, so a batch with none allocates nothing more.
        let mut until_us = None;
        let takes: Vec<Increment> = batch
            .iter()
            .zip(&steps)
            .filter_map(|(inc, s)| match s {
                Step::Ask(Some(chunk)) => Some(Increment {
                    hits: *chunk,
                    take: Some(Take {
                        own: inc.hits,
                        until_us: *until_us.get_or_insert_with(|| self.given_up_us(deadline)),
                    }),
                    ..inc.clone()
                }),
                _ => None,
            })
            .collect();
        // Each increment asked, with what goes to the store in its place:
        // itself, or its take.
        let mut copies = takes.iter();
        let asked: Vec<(&Increment, &Increment)> = batch
            .iter()
            .zip(&steps)
            .filter_map(|(inc, s)| match s {
                Step::Ask(Some(_)) => copies.next().map(|take| (inc, take)),
                Step::Ask(None) => Some((inc, inc)),
                Step::Leased(_) | Step::Cached(_) | Step::Credited(_) => None,
            })
            .collect();
        self.observe(&steps, takes.len());
        let got = if asked.is_empty() {
            Vec::new()
        } else {
            self.ask(&asked, deadline).await?
        };
        // Answers fill the gaps left by what was answered here, in order;
        // both have exactly one count per increment asked, so nothing is
        // ever filled with 0.
        let mut got = got.into_iter();
        Ok(steps
            .into_iter()
            .map(|s| match s {
                Step::Leased(t) | Step::Cached(t) | Step::Credited(t) => Some(t),
                Step::Ask(_) => got.next(),
            })
            .map(|t| t.unwrap_or(Tally::Decided(Decision::Refuse)))
            .collect())
    }

    /// When a take sent now is to be treated as given up, on the store's
    /// clock: half way through its wait, less how far this instance's
    /// clock may be from the store's. A take the store runs later counts
    /// the request's own hits only; one it runs earlier is answered in
    /// time unless the answer then waits half the wait to be read (this
    /// instance starved of CPU), the one way left for a chunk to be counted
    /// for no one.
    pub(super) fn given_up_us(&self, deadline: Option<Instant>) -> u64 {
        let wait = u64::try_from(self.wait(deadline).as_micros()).unwrap_or(u64::MAX);
        Now::wall_us()
            .saturating_add(wait / 2)
            .saturating_sub(clock::guard_us())
    }

    /// Decides what the store could not count: each increment by its rule's
    /// `on_store_failure`, or the server's `--store-failure`.
    pub(super) fn by_policy(&self, ask: &[&Increment]) -> Vec<Tally> {
        if ask.iter().all(|i| i.on_failure.is_none()) {
            self.observer
                .policy_decisions(self.policy.name(), ask.len() as u64);
            if self.policy == FailurePolicy::Fallback {
                return self.fallback.count(ask.iter().copied());
            }
        }
        ask.iter()
            .map(|i| {
                let policy = i.on_failure.unwrap_or(self.policy);
                self.observer.policy_decisions(policy.name(), 1);
                match policy {
                    FailurePolicy::Fallback => self
                        .fallback
                        .count(std::iter::once(*i))
                        .pop()
                        .unwrap_or(Tally::Decided(Decision::Refuse)),
                    // A refund is never refused: it gives back, it asks nothing.
                    FailurePolicy::Deny if !i.refund => Tally::Decided(Decision::Refuse),
                    FailurePolicy::Allow | FailurePolicy::Deny => Tally::Decided(Decision::Admit),
                }
            })
            .collect()
    }

    /// Counts what was answered here, for the metrics.
    fn observe(&self, steps: &[Step], takes: usize) {
        let (mut leased, mut cached, mut credited) = (0, 0, 0);
        for s in steps {
            match s {
                Step::Leased(_) => leased += 1,
                Step::Cached(_) => cached += 1,
                Step::Credited(_) => credited += 1,
                Step::Ask(_) => {}
            }
        }
        if credited > 0 {
            self.observer.credit(credited, 0);
        }
        if cached > 0 {
            self.observer.local_cache_hits(cached);
        }
        if leased > 0 || takes > 0 {
            self.observer.allowance(leased, takes as u64);
        }
    }

    /// Asks the store for what `asked` sends (a request's hits, or its
    /// take's chunk), or the failure policy when it cannot count.
    async fn ask(
        &self,
        asked: &[(&Increment, &Increment)],
        deadline: Option<Instant>,
    ) -> Result<Vec<Tally>, StoreError> {
        let wire: Vec<&Increment> = asked.iter().map(|(_, sent)| *sent).collect();
        let own = || asked.iter().map(|(inc, _)| *inc);
        let until = Instant::now() + self.wait(deadline);
        // Takes not answered (the store failed, or this caller went away
        // mid-call) are given up, so the counter's next may take again.
        let mut takes = Takes {
            net: self,
            asked,
            landed: false,
        };
        let result = self.ask_primary(&wire, deadline).await;
        match result {
            Ok(got) => {
                let mut tallies: Vec<Tally> = asked
                    .iter()
                    .zip(got)
                    .map(|((inc, sent), t)| self.answered(inc, sent, t))
                    .collect();
                takes.landed = true;
                for ((inc, sent), t) in asked.iter().zip(&mut tallies) {
                    if !is_take(inc, sent) {
                        *t = self.allowance.behind_take(inc, *t, until).await;
                    }
                }
                Ok(tallies)
            }
            // The policy decides each request for its own hits: a chunk
            // the store did not count was never leased.
            Err(Undecided::Store) => Ok(self.by_policy(&own().collect::<Vec<_>>())),
            Err(Undecided::Busy) => super::super::shed(
                own(),
                "no store answer in time, and no sign the store was at fault",
            ),
        }
    }

    /// The store's count `t` for `sent` (the request `inc`, or its take),
    /// remembered, and the request's own answer.
    fn answered(&self, inc: &Increment, sent: &Increment, t: Tally) -> Tally {
        if inc.refund {
            // This instance never refuses from what it remembered before
            // the counter went down.
            self.cache.forget(&inc.key);
            return t;
        }
        self.cache.record(sent, &t);
        if is_take(inc, sent) {
            return self.allowance.took(inc, sent, t, Now::wall_us());
        }
        self.allowance.answered(inc, &t);
        self.credit.answered(inc, &t);
        self.allowance.rescue(inc, t)
    }
}

/// The takes of one call to the store, given up unless answered.
struct Takes<'a> {
    net: &'a Resilient,
    asked: &'a [(&'a Increment, &'a Increment)],
    landed: bool,
}

impl Drop for Takes<'_> {
    fn drop(&mut self) {
        if self.landed {
            return;
        }
        for (inc, _) in self.asked.iter().filter(|(inc, sent)| is_take(inc, sent)) {
            self.net.allowance.abandon(inc);
        }
    }
}

/// Whether `sent` is a take of a chunk in `inc`'s place, not `inc` itself.
fn is_take(inc: &Increment, sent: &Increment) -> bool {
    !std::ptr::eq(inc, sent)
}

#[cfg(test)]
#[path = "count_tests.rs"]
mod tests;
