//! One Envoy's RLQS stream: reads its usage reports, keeps one entry per
//! bucket it reports, and answers with assignments. Reports are answered at
//! once (renewing what Envoy holds unless the share moved); a timer re-reads
//! the fleets and pushes shares that moved, follows rule reloads, and
//! abandons idle buckets. When the stream ends, its demand leaves every
//! fleet so the other Envoys get its share back.

use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use super::action::{assignment, bucket_id};
use super::budget::{CallBudget, STREAM_SAVES};
use super::share::Assignment;
use super::target::{Target, resolve};
use super::usage::Usage;
use super::{Place, Shared};

mod assign;
mod state;

use crate::conn::Peer;
use crate::metrics::Skip;
use crate::refusal::Refusal;
use crate::store::demand::{DemandUpdate, UNKNOWN};
use state::{Ending, Key, State, Tracked};

/// The shell's part of a bucket: where it counts, and its place under the
/// instance's bucket caps (given back when dropped).
struct Shell {
    target: Target,
    _place: Place,
}

type Bucket = Tracked<Shell>;

pub(super) struct QuotaStream {
    shared: Arc<Shared>,
    member: u64,
    /// Whose share of buckets this stream's buckets count against.
    peer: Peer,
    tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    /// The decisions: domain, buckets, their times (the pure part).
    state: State<Shell>,
    /// Store calls this stream may still make this second.
    budget: CallBudget,
}

impl QuotaStream {
    pub(super) fn new(
        shared: Arc<Shared>,
        member: u64,
        peer: Peer,
        tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) -> QuotaStream {
        let generation = shared.rules.current().generation;
        let shared_rate = shared.opts.stream_store_rate;
        QuotaStream {
            shared,
            member,
            peer,
            tx,
            state: State::new(generation),
            budget: CallBudget::saving(shared_rate, STREAM_SAVES, Instant::now()),
        }
    }

    pub(super) async fn run(
        mut self,
        mut inbound: Streaming<RateLimitQuotaUsageReports>,
        token: CancellationToken,
    ) {
        self.shared.metrics.quota_stream(true);
        let mut tick = tokio::time::interval(self.shared.opts.rebalance);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = inbound.message() => match msg {
                    Ok(Some(reports)) => {
                        if let Err(status) = self.on_reports(reports).await {
                            let _ = self.tx.send(Err(status)).await;
                            break;
                        }
                    }
                    Ok(None) => break,
                    // A bound on the stream's body (it sent nothing for
                    // too long) or a broken body: say so, then end.
                    Err(status) => {
                        let _ = self.tx.send(Err(status)).await;
                        break;
                    }
                },
                _ = tick.tick() => self.rebalance().await,
                () = token.cancelled() => {
                    self.farewell().await;
                    break;
                }
                () = self.tx.closed() => break,
            }
        }
        self.leave_all().await;
        self.shared.metrics.quota_stream(false);
    }

    async fn on_reports(&mut self, reports: RateLimitQuotaUsageReports) -> Result<(), Status> {
        let domain = self
            .state
            .domain(&reports.domain)
            .map_err(|why| Status::from(Refusal::Invalid(why)))?;
        let now = Instant::now();
        let mut answer = Vec::new();
        for usage in reports.bucket_quota_usages {
            match self.take(&domain, usage, now) {
                Ok(key) => answer.push(key),
                Err(skip) => self.shared.metrics.quota_skip(skip),
            }
        }
        let actions = self.assign(&answer, false).await;
        self.send(actions).await;
        Ok(())
    }

    /// Records one bucket's usage; returns its key, or why it was skipped.
    fn take(
        &mut self,
        domain: &str,
        usage: BucketQuotaUsage,
        now: Instant,
    ) -> Result<Vec<(String, String)>, Skip> {
        let Usage {
            id,
            offered,
            elapsed,
            measured,
        } = Usage::check(usage)?;
        let mut key: Key = id.bucket.into_iter().collect();
        key.sort_unstable();
        if !self.state.knows(&key) {
            if self.state.len() >= self.shared.opts.max_buckets {
                return Err(Skip::TooManyBuckets);
            }
            let place = Place::take(&self.shared, self.peer)?;
            let target = resolve(&self.shared, domain, &key);
            target.subscribe(true);
            let shell = Shell {
                target,
                _place: place,
            };
            self.state.insert(key.clone(), shell, UNKNOWN, now);
        }
        if let Some(shell) = self.state.report(&key, offered != (0, 0), measured, now) {
            shell.target.reported(offered.0, offered.1, elapsed);
        }
        Ok(key)
    }

    /// The timer: follow rule reloads, drop buckets Envoy forgot, abandon
    /// idle ones, push shares that moved.
    async fn rebalance(&mut self) {
        let shared = self.shared.clone();
        self.state.reload(
            shared.rules.current().generation,
            |domain, key, held, shell| {
                shell.target.subscribe(false);
                shell.target.assigned(held, &Assignment::AllowAll);
                shell.target = resolve(&shared, domain, key);
                shell.target.subscribe(true);
            },
        );
        let opts = &self.shared.opts;
        let ended = self
            .state
            .expire(Instant::now(), opts.assignment_ttl, opts.abandon_after);
        let mut actions = Vec::new();
        for (key, b, why) in ended {
            let call = b.written.is_some() && self.afford(1) == 1;
            self.forget(&b, call).await;
            if why == Ending::Abandoned {
                actions.push(BucketAction {
                    bucket_id: Some(bucket_id(&key)),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
            }
        }
        // Those written longest ago (or never) first, while the budgets last.
        let keys = self.state.renewal_order();
        actions.extend(self.assign(&keys, true).await);
        self.send(actions).await;
    }

    /// On shutdown: renew every assignment, so Envoy keeps enforcing its
    /// share for one more TTL while it reconnects to another instance.
    async fn farewell(&mut self) {
        let ttl = self.shared.opts.assignment_ttl;
        let actions = self
            .state
            .farewell()
            .into_iter()
            .map(|(k, held)| assignment(bucket_id(k), &held, ttl))
            .collect();
        self.send(actions).await;
    }

    /// Leaves every fleet. Entries the budgets cannot remove now expire
    /// with the assignment TTL.
    async fn leave_all(&mut self) {
        let buckets: Vec<Bucket> = self.state.drain();
        let mut calls = self.afford(buckets.iter().filter(|b| b.written.is_some()).count());
        let leave: Vec<bool> = buckets
            .iter()
            .map(|b| {
                let call = b.written.is_some() && calls > 0;
                calls -= usize::from(call);
                call
            })
            .collect();
        join_all(
            buckets
                .iter()
                .zip(leave)
                .map(|(b, call)| self.forget(b, call)),
        )
        .await;
    }

    /// Takes a bucket's gauges down and, with `call_store`, its demand out
    /// of its fleet.
    async fn forget(&self, b: &Bucket, call_store: bool) {
        b.shell.target.subscribe(false);
        b.shell
            .target
            .assigned(b.held.as_ref(), &Assignment::AllowAll);
        if let (true, Some((table, on_failure))) = (call_store, b.shell.target.table()) {
            let update = DemandUpdate {
                table: table.to_owned(),
                member: self.member,
                demand: None,
                ttl: self.shared.opts.assignment_ttl,
                on_failure,
            };
            let _ = self.shared.store.demand(&update).await;
        }
    }

    async fn send(&self, actions: Vec<BucketAction>) {
        if actions.is_empty() {
            return;
        }
        let _ = self
            .tx
            .send(Ok(RateLimitQuotaResponse {
                bucket_action: actions,
            }))
            .await;
    }
}
