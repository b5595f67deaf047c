//! The edge of the gRPC services (each call passes it on its way in): each request is reported to its
//! connection's idle timer and its body watched ([`crate::conn::Metered`]);
//! a request tonic refuses before sluice sees it is rewritten as a
//! malformed request; a call its caller abandons is counted.

use std::future::Future;
use std::sync::Arc;

use crate::conn::{Activity, BodyWatch, InFlight, Metered};
use crate::metrics::{Bound, Metrics, Outcome};

/// The RLS service with its guard: each request is reported to its
/// connection's idle timer, and a request tonic refuses before sluice sees it
/// (over `--max-request-bytes`, which tonic answers OUT_OF_RANGE, or not
/// decodable: bad wire format, invalid UTF-8, which tonic answers INTERNAL)
/// is a malformed request like any other: INVALID_ARGUMENT, counted invalid.
#[derive(Clone)]
pub(super) struct Edge<S> {
    pub(super) inner: S,
    pub(super) metrics: Arc<Metrics>,
    /// How each request's body is watched.
    pub(super) watch: BodyWatch,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Edge<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> tonic::codegen::Service<tonic::codegen::http::Request<B>> for Edge<S>
where
    S: tonic::codegen::Service<
            tonic::codegen::http::Request<Metered<B>>,
            Response = tonic::codegen::http::Response<R>,
        >,
    // tonic's generated services answer with a boxed future already, so
    // wrapping it costs no allocation.
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Rewrite<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: tonic::codegen::http::Request<B>) -> Self::Future {
        // Every connection is guarded; a request without one (none today)
        // is watched as if alone on its connection.
        let conn = req
            .extensions()
            .get::<Arc<Activity>>()
            .cloned()
            .unwrap_or_else(|| Arc::new(Activity::new()));
        let busy = conn.start();
        let watch = self.watch.clone();
        let req = req.map(|body| Metered::new(body, watch, conn));
        Rewrite {
            inner: self.inner.call(req),
            metrics: self.metrics.clone(),
            started: std::time::Instant::now(),
            _busy: busy,
            answered: false,
        }
    }
}

/// The answer of [`Edge`], rewritten as it completes.
pub struct Rewrite<F> {
    inner: F,
    metrics: Arc<Metrics>,
    started: std::time::Instant,
    _busy: InFlight,
    answered: bool,
}

impl<F> Drop for Rewrite<F> {
    /// A call dropped unanswered: its caller reset it or its `grpc-timeout`
    /// passed (tonic drops it then).
    fn drop(&mut self) {
        if !self.answered && self.metrics.bound_hit(Bound::Abandoned, 1) {
            tracing::info!(
                "a call was abandoned by its caller (reset, or past its grpc-timeout) before sluice answered (logged once per 10 s; sluice_bound_hits_total{{bound=\"abandoned\"}} counts each)"
            );
        }
    }
}

impl<F, R, E> Future for Rewrite<F>
where
    F: Future<Output = Result<tonic::codegen::http::Response<R>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.inner).poll(cx);
        if polled.is_ready() {
            this.answered = true;
        }
        polled.map_ok(|mut resp| {
            if crate::refusal::tonic_refusal_as_invalid(resp.headers_mut()) {
                this.metrics
                    .request(Outcome::Invalid, this.started.elapsed());
            }
            resp
        })
    }
}
