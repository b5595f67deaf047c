//! The rate-limit service: resolves a request's descriptors against the live
//! rules, counts them in one store call, and turns the decision into Envoy's
//! response. The gRPC handler and `/json` both go through [`RateLimiter::decide`].

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::Status;

use crate::config::LiveRules;
use crate::conn::Activity;
use crate::key::CounterKey;
use crate::limiter::{self, Tally};
use crate::metrics::{Metrics, Outcome};
use crate::privacy::Privacy;
use crate::refusal::Refusal;
use crate::request::{Bounds, Request, RequestError};
use crate::store::{Answer, Increment, Store, StoreError, expect_counts};
use crate::telemetry;

mod admission;
mod decide;
mod headers;
mod metadata;
mod peek;
mod resolve;

pub use headers::ResponseHeaders;
pub(crate) use peek::{Peeked, PeekedDescriptor, PeekedLimit};
pub use resolve::Knobs;

/// Service-wide switches.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Answer OK whatever the limits say (statuses still tell the truth).
    pub global_shadow: bool,
    /// Fill `dynamic_metadata` as the reference's `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
    /// Which entries are email addresses, hashed at the edge.
    pub privacy: Privacy,
    /// The most one request may carry.
    pub limits: Bounds,
    /// Rate-limit headers sluice adds to every answer (`--response-headers`).
    pub response_headers: ResponseHeaders,
    /// Global quota mode and the near-limit ratio.
    pub knobs: Knobs,
    /// Decisions that may wait for the store at once (`--max-pending`).
    pub max_pending: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            global_shadow: false,
            dynamic_metadata: false,
            privacy: Privacy::default(),
            limits: Bounds::default(),
            response_headers: ResponseHeaders::default(),
            knobs: Knobs::default(),
            max_pending: 1024,
        }
    }
}

/// Who asks, as far as the store call cares: the caller's deadline and its
/// connection (for its share of `--max-pending`).
#[derive(Default)]
pub(crate) struct Call<'a> {
    deadline: Option<tokio::time::Instant>,
    conn: Option<&'a Activity>,
}

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Rules come over xDS and none has arrived: an OK would admit what the
    /// rules may refuse, so Envoy's `failure_mode_deny` decides, as with the
    /// reference.
    #[error("no rate limit configuration loaded: waiting for the first xDS response")]
    NoRulesYet,
}

impl From<ServiceError> for Refusal {
    fn from(e: ServiceError) -> Refusal {
        match e {
            ServiceError::Request(e) => Refusal::Invalid(e.to_string()),
            ServiceError::Store(e) => Refusal::Unavailable(e.to_string()),
            ServiceError::NoRulesYet => Refusal::Unavailable(ServiceError::NoRulesYet.to_string()),
        }
    }
}

impl From<ServiceError> for Status {
    /// Through [`Refusal`], the one place refusals become gRPC statuses.
    fn from(e: ServiceError) -> Status {
        Refusal::from(e).into()
    }
}

/// What the request path hands an observer beyond the metrics: each
/// over-limit descriptor (the console's top keys). Observation is told,
/// never asked.
pub trait OverLimitWatch: Send + Sync {
    /// `hits` over-limit answers for `key` under rule `rule`, at Unix second `now`.
    fn over_limit(&self, key: &CounterKey, rule: &str, hits: u64, now: u64);
}

/// Watches nothing: the limiter's watch until one is set.
struct Unwatched;

impl OverLimitWatch for Unwatched {
    fn over_limit(&self, _: &CounterKey, _: &str, _: u64, _: u64) {}
}

/// The decision path over the rules, the store and the metrics. Cheap to
/// clone; the rest of the application reaches those parts through
/// [`App`](crate::application::App), never through the limiter.
#[derive(Clone)]
pub struct RateLimiter {
    rules: Arc<LiveRules>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    watch: Arc<dyn OverLimitWatch>,
    settings: Settings,
    pending: Arc<admission::Pending>,
}

impl RateLimiter {
    pub fn new(
        rules: Arc<LiveRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: Settings,
    ) -> Self {
        let pending = Arc::new(admission::Pending::new(settings.max_pending));
        metrics.register(Box::new(admission::PendingGauge(pending.clone())));
        RateLimiter {
            rules,
            store,
            metrics,
            watch: Arc::new(Unwatched),
            settings,
            pending,
        }
    }

    /// The same limiter, telling `watch` of each over-limit descriptor.
    pub fn watched_by(mut self, watch: Arc<dyn OverLimitWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// Global shadow mode (`--shadow-mode`).
    pub fn global_shadow(&self) -> bool {
        self.settings.global_shadow
    }

    /// Converts, decides and records one protobuf request.
    pub async fn handle(&self, req: RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
        self.handle_call(req, &Call::default()).await
    }

    async fn handle_call(
        &self,
        req: RateLimitRequest,
        call: &Call<'_>,
    ) -> Result<RateLimitResponse, ServiceError> {
        let started = Instant::now();
        let result = match Request::parse(req, &self.settings.limits) {
            Ok(mut req) => {
                req.protect(&self.settings.privacy);
                self.decide_call(req, call).await
            }
            Err(e) => Err(e.into()),
        };
        let outcome = match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => Outcome::OverLimit,
            Ok(_) => Outcome::Ok,
            Err(ServiceError::Store(_) | ServiceError::NoRulesYet) => Outcome::Unavailable,
            Err(ServiceError::Request(_)) => Outcome::Invalid,
        };
        self.metrics.request(outcome, started.elapsed());
        result
    }

    /// Decides a validated request.
    pub async fn decide(&self, req: Request) -> Result<RateLimitResponse, ServiceError> {
        self.decide_call(req, &Call::default()).await
    }

    /// The store's counts for `increments`, unless sluice is too busy to
    /// ask in time: past `--max-pending` (and the connection's share) the
    /// request is shed at once ([`crate::store::shed`]).
    async fn count(
        &self,
        increments: &[Increment],
        call: &Call<'_>,
    ) -> Result<Vec<Tally>, StoreError> {
        let traced = telemetry::enabled();
        // A store that never waits (memory) is asked at once: nothing waits
        // for it, so nothing is admitted or shed.
        let admitted = self.store.waits() || traced;
        let open = || {
            self.metrics
                .open_connections(crate::metrics::Listener::Grpc)
        };
        let _slot = match admitted.then(|| self.pending.enter(call.conn, open)) {
            Some(None) => {
                if self.metrics.bound_hit(crate::metrics::Bound::Shed, 1) {
                    tracing::warn!(
                        max_pending = self.settings.max_pending,
                        "--max-pending decisions are waiting for the store; shedding (by the rule's own on_store_failure, else UNAVAILABLE; logged once per 10 s)"
                    );
                }
                return crate::store::shed(
                    increments,
                    "--max-pending decisions already wait for the store",
                );
            }
            slot => slot,
        };
        if traced {
            let span = Some(telemetry::store_span());
            return telemetry::within(span, self.store.increment_until(increments, call.deadline))
                .await;
        }
        // What the store has at hand is answered without a future: the
        // memory store, and a shared store's leases.
        match self.store.answer(increments, call.deadline) {
            Answer::Now(counted) => counted,
            Answer::Later(asked) => asked.await,
        }
    }

    /// `--stop-increment-when-over-limit`, as the reference's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: read every counter first
    /// (adding nothing); if some would go over with this request's hits, only
    /// those are incremented, and the request spends nothing of the others.
    /// One more store round trip, and not atomic with the increment (as in
    /// the reference).
    async fn spare_the_others(
        &self,
        increments: &mut [Increment],
        now_ms: u64,
        call: &Call<'_>,
    ) -> Result<(), ServiceError> {
        let peek: Vec<Increment> = increments
            .iter()
            .map(|i| Increment {
                hits: 0,
                refund: false,
                ..i.clone()
            })
            .collect();
        // The read is a store call like the increment: under the same
        // `--max-pending` and the caller's deadline.
        let seen = expect_counts(self.count(&peek, call).await?, peek.len())?;
        let over: Vec<bool> = increments
            .iter()
            .zip(&seen)
            .map(|(inc, tally)| {
                // A refund is never over, and is always given back.
                !inc.refund
                    && limiter::would_exceed(
                        inc.limit,
                        inc.hits,
                        &inc.algorithm,
                        &inc.window,
                        tally,
                        now_ms,
                    )
            })
            .collect();
        if over.iter().any(|o| *o) {
            for (inc, o) in increments.iter_mut().zip(over) {
                if !o && !inc.refund {
                    inc.hits = 0;
                }
            }
        }
        Ok(())
    }
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

impl RateLimiter {
    /// One `ShouldRateLimit` call: the caller's deadline and connection
    /// taken from it, decided, answered. The gRPC server calls it directly
    /// ([`crate::server`]'s RLS service), without the trait's boxed future.
    pub(crate) async fn serve(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, Status> {
        let span = telemetry::enabled().then(|| telemetry::decision_span(request.metadata()));
        // Taken apart so the call borrows its connection instead of
        // cloning it.
        let (metadata, extensions, message) = request.into_parts();
        let call = Call {
            deadline: admission::deadline(&metadata),
            conn: extensions.get::<Arc<Activity>>().map(|a| &**a),
        };
        // Awaited in place: through `telemetry::within` the decision's
        // future (the largest of the request) was moved twice more.
        let answer = match span {
            Some(span) => {
                tracing::Instrument::instrument(self.handle_call(message, &call), span).await?
            }
            None => self.handle_call(message, &call).await?,
        };
        Ok(tonic::Response::new(answer))
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, Status> {
        self.serve(request).await
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
