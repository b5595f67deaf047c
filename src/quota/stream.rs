//! One Envoy's RLQS stream: reads its usage reports, keeps one entry per
//! bucket it reports, and answers with assignments. Reports are answered at
//! once (renewing what Envoy holds unless the share moved); a timer re-reads
//! the fleets and pushes shares that moved, follows rule reloads, and
//! abandons idle buckets. When the stream ends, its demand leaves every
//! fleet so the other Envoys get its share back.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use super::Shared;
use super::action::assignment;
use super::share::{self, Assignment};
use super::target::{Target, resolve};
use crate::metrics::Skip;
use crate::store::demand::{DemandUpdate, Fleet, UNKNOWN};

/// Requests per second no Envoy can really have offered: a report claiming
/// more is garbage, skipped.
const MAX_RATE: f64 = 1e9;

/// One bucket as this stream knows it.
struct Bucket {
    id: BucketId,
    target: Target,
    /// Requests per second offered in the last measured report, or UNKNOWN.
    demand: f64,
    last_report: Instant,
    last_busy: Instant,
    /// What Envoy holds from us.
    held: Option<Assignment>,
    /// When this stream last wrote its demand to the bucket's table.
    written: Option<Instant>,
}

pub(super) struct QuotaStream {
    shared: Arc<Shared>,
    member: u64,
    tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    domain: Option<String>,
    buckets: HashMap<Vec<(String, String)>, Bucket>,
    generation: u64,
}

impl QuotaStream {
    pub(super) fn new(
        shared: Arc<Shared>,
        member: u64,
        tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) -> QuotaStream {
        let generation = shared.rules.current().generation;
        QuotaStream {
            shared,
            member,
            tx,
            domain: None,
            buckets: HashMap::new(),
            generation,
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
                    Ok(None) | Err(_) => break,
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
        let domain = match (&self.domain, reports.domain.as_str()) {
            (_, "") => {
                return Err(Status::invalid_argument(
                    "usage reports must name the domain",
                ));
            }
            (None, d) => {
                self.domain = Some(d.to_owned());
                d.to_owned()
            }
            (Some(known), d) if known == d => d.to_owned(),
            (Some(known), d) => {
                return Err(Status::invalid_argument(format!(
                    "the stream's domain is '{known:.64}'; a report named '{d:.64}'"
                )));
            }
        };
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
        let id = usage.bucket_id.ok_or(Skip::NoBucketId)?;
        if id.bucket.is_empty() {
            return Err(Skip::NoBucketId);
        }
        let bytes: usize = id.bucket.iter().map(|(k, v)| k.len() + v.len()).sum();
        if id.bucket.len() > crate::config::MAX_BUCKET_ENTRIES
            || bytes > MAX_BUCKET_BYTES
            || id
                .bucket
                .iter()
                .any(|(k, v)| k.len() > MAX_TEXT || v.len() > MAX_TEXT)
        {
            return Err(Skip::Oversized);
        }
        let elapsed = usage
            .time_elapsed
            .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
        let offered = usage
            .num_requests_allowed
            .saturating_add(usage.num_requests_denied) as f64;
        // Envoy reports whole seconds, and 0 on a bucket's first report.
        let rate = (elapsed >= 1.0).then(|| offered / elapsed);
        if !(0.0..=1e7).contains(&elapsed) || rate.is_some_and(|r| r > MAX_RATE) {
            return Err(Skip::BadCounts);
        }
        let mut key: Vec<(String, String)> = id.bucket.clone().into_iter().collect();
        key.sort_unstable();
        if !self.buckets.contains_key(&key) {
            if self.buckets.len() >= self.shared.opts.max_buckets {
                return Err(Skip::TooManyBuckets);
            }
            let target = resolve(&self.shared, domain, &key);
            target.subscribe(true);
            self.buckets.insert(
                key.clone(),
                Bucket {
                    id,
                    target,
                    demand: UNKNOWN,
                    last_report: now,
                    last_busy: now,
                    held: None,
                    written: None,
                },
            );
        }
        if let Some(b) = self.buckets.get_mut(&key) {
            b.last_report = now;
            if offered > 0.0 {
                b.last_busy = now;
            }
            if let Some(r) = rate {
                b.demand = r;
            }
            b.target.reported(
                usage.num_requests_allowed,
                usage.num_requests_denied,
                elapsed,
            );
        }
        Ok(key)
    }

    /// Computes the assignments of `keys`; with `only_changed`, keeps those
    /// that moved enough to be worth replacing Envoy's bucket.
    async fn assign(
        &mut self,
        keys: &[Vec<(String, String)>],
        only_changed: bool,
    ) -> Vec<BucketAction> {
        let ttl = self.shared.opts.assignment_ttl;
        let member = self.member;
        let store = self.shared.store.clone();
        let global_shadow = self.shared.global_shadow;
        // The timer may use a fleet another stream read moments ago, as long
        // as this stream's own entry was written lately; a report always
        // writes (its demand is new).
        let fresh = self.shared.opts.rebalance / 2;
        let now = Instant::now();
        let fleets = join_all(keys.iter().map(|k| {
            let b = self.buckets.get(k);
            let update = b.and_then(|b| {
                b.target.table().map(|(table, on_failure)| DemandUpdate {
                    table: table.to_owned(),
                    member,
                    demand: Some(b.demand),
                    ttl,
                    on_failure,
                })
            });
            let written_lately = b
                .and_then(|b| b.written)
                .is_some_and(|w| now.duration_since(w) < ttl / 3);
            let shared = &self.shared;
            let store = store.clone();
            async move {
                let u = update?;
                if only_changed && written_lately {
                    let demand = u.demand.unwrap_or(UNKNOWN);
                    if let Some(members) = shared.fleets.get(&u.table, fresh, member, demand) {
                        return Some((Fleet::Members(members), false));
                    }
                }
                let fleet = store.demand(&u).await;
                if let Fleet::Members(members) = &fleet {
                    shared.fleets.put(&u.table, members, fresh);
                }
                Some((fleet, true))
            }
        }))
        .await;
        let mut actions = Vec::new();
        for (key, fleet) in keys.iter().zip(fleets) {
            let Some(b) = self.buckets.get_mut(key) else {
                continue;
            };
            let fleet = fleet.map(|(fleet, wrote)| {
                if wrote {
                    b.written = Some(now);
                }
                fleet
            });
            let new = match fleet {
                None => Assignment::AllowAll,
                Some(Fleet::Allow) => Assignment::AllowAll,
                Some(Fleet::Deny) => Assignment::DenyAll,
                Some(Fleet::Members(members)) => {
                    b.target.assignment(member, &members, global_shadow)
                }
            };
            let push = share::worth_pushing(b.held.as_ref(), &new);
            if only_changed && !push {
                continue;
            }
            let give = match (push, b.held) {
                (false, Some(held)) => held,
                _ => new,
            };
            b.target.assigned(b.held.as_ref(), &give);
            b.held = Some(give);
            actions.push(assignment(b.id.clone(), &give, ttl));
        }
        actions
    }

    /// The timer: follow rule reloads, drop buckets Envoy forgot, abandon
    /// idle ones, push shares that moved.
    async fn rebalance(&mut self) {
        let generation = self.shared.rules.current().generation;
        if generation != self.generation {
            self.generation = generation;
            if let Some(domain) = self.domain.clone() {
                for (key, b) in &mut self.buckets {
                    b.target.subscribe(false);
                    b.target.assigned(b.held.as_ref(), &Assignment::AllowAll);
                    b.target = resolve(&self.shared, &domain, key);
                    b.target.subscribe(true);
                    b.held = None;
                }
            }
        }
        let now = Instant::now();
        let ttl = self.shared.opts.assignment_ttl;
        let abandon_after = self.shared.opts.abandon_after;
        let (mut gone, mut idle) = (Vec::new(), Vec::new());
        for (key, b) in &self.buckets {
            if now.duration_since(b.last_report) > ttl * 3 {
                gone.push(key.clone());
            } else if now.duration_since(b.last_busy) > abandon_after {
                idle.push(key.clone());
            }
        }
        let mut actions = Vec::new();
        for key in gone.iter().chain(&idle) {
            if let Some(b) = self.buckets.remove(key) {
                self.forget(&b).await;
                if idle.contains(key) {
                    actions.push(BucketAction {
                        bucket_id: Some(b.id),
                        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                    });
                }
            }
        }
        let keys: Vec<_> = self.buckets.keys().cloned().collect();
        actions.extend(self.assign(&keys, true).await);
        self.send(actions).await;
    }

    /// On shutdown: renew every assignment, so Envoy keeps enforcing its
    /// share for one more TTL while it reconnects to another instance.
    async fn farewell(&mut self) {
        let ttl = self.shared.opts.assignment_ttl;
        let actions = self
            .buckets
            .values()
            .filter_map(|b| b.held.map(|h| assignment(b.id.clone(), &h, ttl)))
            .collect();
        self.send(actions).await;
    }

    async fn leave_all(&mut self) {
        let buckets: Vec<Bucket> = self.buckets.drain().map(|(_, b)| b).collect();
        join_all(buckets.iter().map(|b| self.forget(b))).await;
    }

    /// Takes a bucket's demand out of its fleet and its gauges down.
    async fn forget(&self, b: &Bucket) {
        b.target.subscribe(false);
        b.target.assigned(b.held.as_ref(), &Assignment::AllowAll);
        if let Some((table, on_failure)) = b.target.table() {
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

/// Bytes of one bucket id key or value; a longer one is skipped.
const MAX_TEXT: usize = 1024;
/// Bytes of a whole bucket id, keys and values (as `--max-descriptor-bytes`
/// bounds a descriptor): what one bucket can cost a stream's memory.
const MAX_BUCKET_BYTES: usize = 4096;
