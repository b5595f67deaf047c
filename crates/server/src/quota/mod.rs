//! Quota mode: Envoy's Rate Limit Quota Service
//! (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService`), served from
//! the same rule files as the classic service, on the same gRPC listener.
//!
//! Each Envoy opens one stream and reports, per bucket, how many requests it
//! allowed and denied; sluice answers with a token bucket per bucket that
//! Envoy enforces locally, so no request waits for a round trip. A bucket id
//! is matched against the domain's rules ([`crate::config::BucketMatch`]);
//! the rule's rate is split among every Envoy reporting that bucket, on
//! every sluice instance sharing the store, by demand ([`share`]). Streams
//! ([`stream`]) rebalance on a timer and push when a share moves enough,
//! when the rules change, or when an Envoy joins or leaves.

mod action;
mod budget;
mod estimate;
mod fleets;
mod peers;
mod share;
mod stats;
mod stream;
mod target;
mod usage;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::config::LiveRules;
use crate::conn::{Activity, Peer};
use crate::metrics::{Bound, Metrics, Skip};
use crate::refusal::Refusal;
use crate::store::Store;

/// The gRPC service name, for health checks.
pub const SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// Bounds and timings of quota mode.
#[derive(Debug, Clone, Copy)]
pub struct QuotaOptions {
    /// Streams (Envoys) served at once (`--quota-max-streams`).
    pub max_streams: usize,
    /// Buckets one stream may report (`--quota-max-buckets`).
    pub max_buckets: usize,
    /// Buckets all streams of this instance may hold together
    /// (`--quota-max-total-buckets`).
    pub max_total_buckets: usize,
    /// How long an assignment holds without being renewed
    /// (`--quota-assignment-ttl`); Envoy reads whole seconds.
    pub assignment_ttl: Duration,
    /// How often each stream re-reads its fleets and pushes changed shares
    /// (`--quota-rebalance-interval`).
    pub rebalance: Duration,
    /// A bucket reported with no requests for this long is abandoned
    /// (`--quota-abandon-after`).
    pub abandon_after: Duration,
    /// Store calls one stream may make per second
    /// (`--quota-stream-store-rate`).
    pub stream_store_rate: u32,
    /// Store calls all streams together may make per second
    /// (`--quota-store-rate`).
    pub store_rate: u32,
    /// Streams one peer may hold (`--quota-max-streams-per-peer`).
    pub max_streams_per_peer: usize,
    /// Buckets one peer's streams may hold together
    /// (`--quota-max-buckets-per-peer`).
    pub max_buckets_per_peer: usize,
    /// After start, how long the instance learns what the fleet holds before
    /// it assigns (`--quota-learning`): reports are counted and demand
    /// written, but nothing is pushed, so Envoys keep what they hold.
    pub learning: Duration,
    /// A stream whose first report has not come within this is ended
    /// (`--quota-first-report-timeout`).
    pub first_report: Duration,
    /// A stream that sends nothing for this long is ended
    /// (`--quota-stream-idle`; Envoy reports every 5 s).
    pub stream_idle: Duration,
}

impl Default for QuotaOptions {
    fn default() -> Self {
        QuotaOptions {
            max_streams: 1024,
            max_buckets: 1000,
            max_total_buckets: 10_000,
            assignment_ttl: Duration::from_secs(15),
            rebalance: Duration::from_secs(1),
            abandon_after: Duration::from_secs(300),
            stream_store_rate: 200,
            store_rate: 2000,
            max_streams_per_peer: 64,
            max_buckets_per_peer: 2000,
            first_report: Duration::from_secs(10),
            learning: Duration::from_secs(10),
            stream_idle: Duration::from_secs(60),
        }
    }
}

impl QuotaOptions {
    /// Settings under which a stream's demand entries could not all be
    /// rewritten within a third of the assignment TTL (so an entry could
    /// expire while its Envoy still holds a share, and the others be
    /// assigned as if it had gone): one line each, empty when consistent.
    pub fn store_rate_shortfalls(&self) -> Vec<String> {
        let third = self.assignment_ttl.as_secs_f64() / 3.0;
        let round = |buckets: usize, rate: u32| buckets as f64 / f64::from(rate.max(1));
        let mut out = Vec::new();
        let per_stream = round(self.max_buckets, self.stream_store_rate);
        if per_stream > third {
            out.push(format!(
                "--quota-max-buckets {} at --quota-stream-store-rate {} takes {per_stream:.0} s to rewrite, more than a third of --quota-assignment-ttl ({third:.0} s)",
                self.max_buckets, self.stream_store_rate
            ));
        }
        let per_instance = round(self.max_total_buckets, self.store_rate);
        if per_instance > third {
            out.push(format!(
                "--quota-max-total-buckets {} at --quota-store-rate {} takes {per_instance:.0} s to rewrite, more than a third of --quota-assignment-ttl ({third:.0} s)",
                self.max_total_buckets, self.store_rate
            ));
        }
        out
    }
}

/// What every stream shares.
pub(crate) struct Shared {
    pub(crate) rules: Arc<LiveRules>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) opts: QuotaOptions,
    /// `--shadow-mode`: every bucket is allowed, what would be denied counted.
    pub(crate) global_shadow: bool,
    /// Fleets read lately, shared by this instance's streams.
    fleets: fleets::Fleets,
    /// Quota's own numbers per rule (registered with the metrics).
    stats: Arc<stats::QuotaStats>,
    /// Store calls left to this instance's streams this second.
    budget: budget::SharedBudget,
    /// Buckets held by all streams (`max_total_buckets` at most).
    held: AtomicUsize,
    /// A permit per open stream (`max_streams`).
    streams: Arc<Semaphore>,
    /// Streams and buckets per peer.
    peers: Arc<peers::Peers>,
    /// A random base for member ids, so two instances never share one.
    instance: u64,
    next: AtomicU64,
    /// Until then the instance learns the fleet and assigns nothing.
    learning_until: tokio::time::Instant,
}

impl Shared {
    /// Whether the instance is still learning what the fleet holds.
    pub(crate) fn learning(&self, now: tokio::time::Instant) -> bool {
        now < self.learning_until
    }
}

/// One bucket's place under `--quota-max-total-buckets` and its peer's
/// `--quota-max-buckets-per-peer`.
pub(crate) struct Place {
    shared: Arc<Shared>,
    /// The peer's share, given back with the place.
    _peer: peers::PeerHold,
}

impl Place {
    /// A place, if the instance holds fewer buckets than its cap and the
    /// peer fewer than its share; which one was full, if not.
    pub(crate) fn take(shared: &Arc<Shared>, peer: Peer) -> Result<Place, Skip> {
        let hold = shared.peers.bucket(peer).ok_or(Skip::PeerBuckets)?;
        let cap = shared.opts.max_total_buckets;
        shared
            .held
            .fetch_update(Relaxed, Relaxed, |n| (n < cap).then_some(n + 1))
            .map_err(|_| Skip::TooManyBuckets)?;
        Ok(Place {
            shared: shared.clone(),
            _peer: hold,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.shared.held.fetch_sub(1, Relaxed);
    }
}

impl Shared {
    /// Streams open on this instance now.
    pub(crate) fn open_streams(&self) -> usize {
        self.opts
            .max_streams
            .max(1)
            .saturating_sub(self.streams.available_permits())
    }

    fn member(&self) -> u64 {
        self.instance.wrapping_add(
            self.next
                .fetch_add(1, Relaxed)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
    }
}

/// The RLQS gRPC service.
#[derive(Clone)]
pub struct QuotaService {
    shared: Arc<Shared>,
    token: CancellationToken,
}

impl QuotaService {
    /// Streams end, with a last renewal of their assignments, when `token`
    /// is cancelled.
    pub fn new(
        rules: Arc<LiveRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        opts: QuotaOptions,
        global_shadow: bool,
        token: CancellationToken,
    ) -> QuotaService {
        let instance = {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(std::process::id())
        };
        metrics.quota_learning(opts.learning);
        let stats = Arc::new(stats::QuotaStats::default());
        metrics.register(Box::new(stats.clone()));
        QuotaService {
            shared: Arc::new(Shared {
                rules,
                store,
                metrics,
                opts,
                global_shadow,
                fleets: fleets::Fleets::default(),
                stats,
                budget: budget::SharedBudget::new(opts.store_rate),
                held: AtomicUsize::new(0),
                streams: Arc::new(Semaphore::new(opts.max_streams.max(1))),
                peers: peers::Peers::new(opts.max_streams_per_peer, opts.max_buckets_per_peer),
                instance,
                next: AtomicU64::new(1),
                learning_until: tokio::time::Instant::now() + opts.learning,
            }),
            token,
        }
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let permit = self
            .shared
            .streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                Status::from(Refusal::Exhausted(format!(
                    "{} quota streams open already (--quota-max-streams)",
                    self.shared.opts.max_streams
                )))
            })?;
        let conn = request.extensions().get::<Arc<Activity>>();
        let peer = conn.map_or(Peer::Local, |a| a.peer);
        let Some(peer_hold) = self.shared.peers.stream(peer) else {
            if self.shared.metrics.bound_hit(Bound::QuotaPeerStreams, 1) {
                tracing::warn!(peer = %peer.masked(), "a peer asked for more than --quota-max-streams-per-peer quota streams; refused (logged once per 10 s)");
            }
            return Err(Refusal::Exhausted(format!(
                "this peer holds {} quota streams already (--quota-max-streams-per-peer)",
                self.shared.opts.max_streams_per_peer
            ))
            .into());
        };
        // The connection is busy for as long as the stream lives, so the
        // idle timeout never cuts an Envoy that reports on one stream (a
        // silent stream is ended by --quota-stream-idle instead).
        let busy = conn.map(Activity::start);
        let (tx, rx) = mpsc::channel(8);
        let member = self.shared.member();
        let task = stream::QuotaStream::new(self.shared.clone(), member, peer, tx);
        let token = self.token.clone();
        tokio::spawn(async move {
            task.run(request.into_inner(), token).await;
            drop(busy);
            drop(peer_hold);
            drop(permit);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests;
