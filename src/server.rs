//! Runs the gRPC and admin servers on listeners bound by the caller, with one
//! shutdown path that every task obeys: health goes NOT_SERVING, the servers
//! stop accepting, in-flight requests finish within a bounded grace period.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tracing::{info, warn};

use crate::admin::{self, AdminLimits, AdminState};
use crate::config::watch;
use crate::config::xds::{self, XdsConfig};
use crate::conn::{
    self, Activity, BodyBudget, ConnLimits, Guarded, IdleBy, InFlight, Metered, Watch,
};
use crate::console::{self, Console};
use crate::limiter::Now;
use crate::metrics::{Bound, Listener, Metrics, Outcome};
use crate::quota::{self, QuotaOptions, QuotaService};
use crate::service::RateLimiter;
use crate::statsd::{self, StatsdConfig};
use crate::tls::{self, Tls};

/// The gRPC server, plain or TLS, as one type.
type GrpcFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// Streams a client may reset before sluice has accepted them (h2's own
/// default, set explicitly because tonic leaves it unset).
const MAX_PENDING_RESETS: usize = 20;

/// The gRPC service name Envoy and Kubernetes probes ask about.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// Every listener, bound before anything is spawned so a bind error is
/// reported at startup instead of vanishing in a task.
#[derive(Debug)]
pub struct Listeners {
    pub grpc: GrpcListener,
    pub admin: TcpListener,
}

/// Where gRPC is served: TCP (`--grpc-addr`), or a Unix socket
/// (`--grpc-uds`, the reference's `GRPC_UDS`) for a sidecar beside Envoy.
#[derive(Debug)]
pub enum GrpcListener {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

impl From<TcpListener> for GrpcListener {
    fn from(l: TcpListener) -> Self {
        GrpcListener::Tcp(l)
    }
}

impl GrpcListener {
    /// `127.0.0.1:8081`, or `unix:/path/to.sock`.
    pub fn describe(&self) -> std::io::Result<String> {
        match self {
            GrpcListener::Tcp(l) => Ok(l.local_addr()?.to_string()),
            #[cfg(unix)]
            GrpcListener::Unix(_, path) => Ok(format!("unix:{}", path.display())),
        }
    }
}

/// Why serving stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("admin server: {0}")]
    Admin(#[from] std::io::Error),
}

/// How to serve.
#[derive(Clone)]
pub struct ServeOptions {
    /// Longest drain of in-flight requests after shutdown starts.
    pub grace: Duration,
    /// Largest gRPC request message accepted (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// TLS (or mutual TLS) on the gRPC listener; plain TCP when `None`.
    pub tls: Option<Arc<Tls>>,
    /// Reload the rules when their directory changes (SIGHUP always reloads).
    pub watch_config: bool,
    /// Bounds of the gRPC listener.
    pub grpc: GrpcLimits,
    /// Bounds and access rules of the admin listener.
    pub admin: AdminLimits,
    /// Send the reference's stats over UDP.
    pub statsd: Option<StatsdConfig>,
    /// Take the rules from an xDS management server instead of files.
    pub xds: Option<XdsConfig>,
    /// Bounds and timings of the quota (RLQS) service.
    pub quota: QuotaOptions,
}

/// What one client may hold on the gRPC listener.
#[derive(Debug, Clone, Copy)]
pub struct GrpcLimits {
    pub conn: ConnLimits,
    /// Concurrent HTTP/2 streams per connection.
    pub max_streams: u32,
    /// Streams refused or reset by sluice on one connection before it is
    /// closed with GOAWAY (ENHANCE_YOUR_CALM).
    pub max_reset_streams: usize,
    /// HTTP/2 PING interval, and how long an answer may take before the
    /// connection is dropped as dead.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Bounds on request bodies.
    pub body: BodyLimits,
}

/// Bounds on `ShouldRateLimit` request bodies still arriving.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// A body not whole within this is refused (`--body-timeout`).
    pub timeout: Duration,
    /// Bytes received and not yet decoded, per connection.
    pub per_connection: usize,
    /// The same over the process; past it, connections above their even
    /// share are refused.
    pub per_process: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            timeout: Duration::from_secs(5),
            per_connection: 4 << 20,
            per_process: 256 << 20,
        }
    }
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            conn: ConnLimits {
                max_connections: 4096,
                max_per_peer: 512,
                handshake_timeout: Duration::from_secs(5),
                max_in_flight_per_peer: 512,
                idle_timeout: Duration::from_secs(300),
                write_stall: Duration::from_secs(20),
            },
            max_streams: 1024,
            max_reset_streams: 1024,
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            body: BodyLimits::default(),
        }
    }
}

/// Serves until `shutdown` resolves or `token` is cancelled, then drains for
/// at most `opts.grace`. Background tasks (sweeper, config watcher) obey the
/// same token and are awaited before returning.
pub async fn run(
    listeners: Listeners,
    limiter: RateLimiter,
    shutdown: impl Future<Output = ()> + Send + 'static,
    opts: ServeOptions,
    token: CancellationToken,
) -> Result<(), ServeError> {
    let grace = opts.grace;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    for name in [SERVICE_NAME, quota::SERVICE_NAME] {
        reporter
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }

    let draining = Arc::new(AtomicBool::new(false));
    let stopper = {
        let (token, draining) = (token.clone(), draining.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown => {}
                () = token.cancelled() => {}
            }
            info!("shutdown started: health NOT_SERVING, draining in-flight requests");
            draining.store(true, Ordering::Relaxed);
            reporter
                .set_service_status("", ServingStatus::NotServing)
                .await;
            for name in [SERVICE_NAME, quota::SERVICE_NAME] {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
            token.cancel();
        })
    };

    let sweeper = tokio::spawn(sweep(limiter.clone(), token.clone()));
    let console = Arc::new(Console::default());
    let console_task = tokio::spawn(console::run(
        console.clone(),
        limiter.clone(),
        token.clone(),
    ));
    let statsd = opts
        .statsd
        .clone()
        .map(|cfg| tokio::spawn(statsd::run(cfg, limiter.metrics().clone(), token.clone())));
    let store_task = limiter
        .store()
        .clone()
        .background(token.clone())
        .map(tokio::spawn);
    let watch_files = opts.watch_config && opts.xds.is_none();
    let watcher =
        tokio::spawn(watch::Watch::start(limiter.rules().clone(), watch_files).run(token.clone()));
    let xds_task = opts
        .xds
        .clone()
        .map(|cfg| tokio::spawn(xds::run(cfg, limiter.rules().clone(), token.clone())));
    info!(
        grpc_addr = %listeners.grpc.describe()?,
        admin_addr = %listeners.admin.local_addr()?,
        config = %limiter.rules().dir().display(),
        store = limiter.store().health().backend,
        "sluice listening"
    );
    let quota = QuotaService::new(
        limiter.rules().clone(),
        limiter.store().clone(),
        limiter.metrics().clone(),
        opts.quota,
        limiter.global_shadow(),
        token.clone(),
    );
    let g = opts.grpc;
    let (quota_first, quota_idle) = (opts.quota.first_report, opts.quota.stream_idle);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(g.max_streams)
        .http2_keepalive_interval(Some(g.keepalive_interval))
        .http2_keepalive_timeout(Some(g.keepalive_timeout))
        // tonic switches hyper's guard off unless asked (RUSTSEC-2024-0003):
        // a client that keeps opening streams past the cap gets a GOAWAY
        // instead of one refusal each, forever.
        .http2_max_local_error_reset_streams(Some(g.max_reset_streams))
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        .add_service(health)
        .add_service(Guard {
            inner: RateLimitServiceServer::new(limiter.clone())
                .max_decoding_message_size(opts.max_request_bytes),
            metrics: limiter.metrics().clone(),
            watch: Watch::Unary(BodyBudget::new(
                g.body.per_connection,
                g.body.per_process,
                g.body.timeout,
                limiter.metrics().clone(),
            )),
        })
        .add_service(Guard {
            inner: RateLimitQuotaServiceServer::new(quota)
                .max_decoding_message_size(opts.max_request_bytes),
            metrics: limiter.metrics().clone(),
            watch: Watch::Stream {
                first: quota_first,
                idle: quota_idle,
                metrics: limiter.metrics().clone(),
            },
        });
    let stop = token.clone().cancelled_owned();
    let metrics = limiter.metrics().clone();
    let (grpc, tls_task): (GrpcFuture, _) = match (listeners.grpc, opts.tls) {
        (GrpcListener::Tcp(listener), Some(tls)) => {
            info!(mutual = tls.mutual(), "gRPC listener speaks TLS");
            let admitted = conn::accept(listener, g.conn, Listener::Grpc, metrics, token.clone());
            let incoming = tls::incoming(admitted, tls.clone(), g.conn, token.clone());
            (
                Box::pin(router.serve_with_incoming_shutdown(incoming, stop)),
                Some(tokio::spawn(tls.watch(token.clone()))),
            )
        }
        (GrpcListener::Tcp(listener), None) => {
            let admitted = conn::accept(listener, g.conn, Listener::Grpc, metrics, token.clone());
            (
                Box::pin(router.serve_with_incoming_shutdown(guarded(admitted, g.conn), stop)),
                None,
            )
        }
        // main refuses TLS on a Unix socket: its peers are on this host.
        #[cfg(unix)]
        (GrpcListener::Unix(listener, _), _) => {
            let admitted = conn::accept(listener, g.conn, Listener::Grpc, metrics, token.clone());
            (
                Box::pin(router.serve_with_incoming_shutdown(guarded(admitted, g.conn), stop)),
                None,
            )
        }
    };
    let admin = admin::run(
        listeners.admin,
        AdminState {
            limiter,
            draining,
            access: Arc::new(opts.admin.access.clone()),
            console,
        },
        opts.admin,
        token.clone(),
    );
    let servers = async {
        tokio::try_join!(async { grpc.await.map_err(ServeError::from) }, async {
            admin.await.map_err(ServeError::from)
        })
    };
    tokio::pin!(servers);
    let result = tokio::select! {
        r = &mut servers => r.map(|_| ()),
        () = token.cancelled() => {
            match tokio::time::timeout(grace, &mut servers).await {
                Ok(r) => r.map(|_| ()),
                Err(_) => {
                    warn!(grace_seconds = grace.as_secs_f64(), "drain took longer than the grace period; exiting");
                    Ok(())
                }
            }
        }
    };
    token.cancel();
    let _ = sweeper.await;
    let _ = console_task.await;
    if let Some(t) = store_task {
        let _ = t.await;
    }
    let _ = watcher.await;
    if let Some(t) = xds_task {
        let _ = t.await;
    }
    if let Some(t) = statsd {
        let _ = t.await;
    }
    if let Some(t) = tls_task {
        let _ = t.await;
    }
    let _ = stopper.await;
    result
}

/// Plain connections under the guards, as tonic's incoming stream.
fn guarded<S>(
    admitted: tokio::sync::mpsc::Receiver<conn::Admitted<S>>,
    limits: ConnLimits,
) -> impl tokio_stream::Stream<Item = Result<Guarded<S>, std::io::Error>> {
    tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(admitted),
        move |(stream, ticket)| {
            Ok::<_, std::io::Error>(Guarded::new(stream, ticket, limits, IdleBy::Requests))
        },
    )
}

/// Frees ended windows once a second so memory follows live keys, drops
/// the metric series of rules no longer in force, and publishes how many
/// counters live in memory.
async fn sweep(limiter: RateLimiter, token: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let store = limiter.store();
                store.sweep(Now::wall());
                let c = store.counters();
                limiter.metrics().counters(c.live, c.evictions);
                limiter.metrics().prune_rules();
            }
            () = token.cancelled() => return,
        }
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are registered when this is
/// called, not when the future is first polled, so a signal that arrives
/// right after startup is a clean shutdown rather than the default kill.
#[cfg(unix)]
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        async fn recv(s: Option<tokio::signal::unix::Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(term) => info!("SIGTERM received"),
            () = recv(int) => info!("SIGINT received"),
        }
    }
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The RLS service with its guard: each request is reported to its
/// connection's idle timer, and a request tonic refuses before sluice sees it
/// (over `--max-request-bytes`, which tonic answers OUT_OF_RANGE, or not
/// decodable: bad wire format, invalid UTF-8, which tonic answers INTERNAL)
/// is a malformed request like any other: INVALID_ARGUMENT, counted invalid.
#[derive(Clone)]
struct Guard<S> {
    inner: S,
    metrics: Arc<Metrics>,
    /// How each request's body is watched.
    watch: Watch,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Guard<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> tonic::codegen::Service<tonic::codegen::http::Request<B>> for Guard<S>
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
        let busy = Some(conn.start());
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

/// The answer of [`Guard`], rewritten as it completes.
pub struct Rewrite<F> {
    inner: F,
    metrics: Arc<Metrics>,
    started: std::time::Instant,
    _busy: Option<InFlight>,
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

/// Whether tonic refused the request before the handler ran: a message over
/// the size limit, or one that does not decode.
fn refused_by_tonic(headers: &tonic::codegen::http::HeaderMap) -> bool {
    match headers.get("grpc-status").map(|v| v.as_bytes()) {
        Some(b"11") => true,
        Some(b"13") => headers
            .get("grpc-message")
            .is_some_and(|m| m.as_bytes().starts_with(b"failed%20to%20decode")),
        _ => false,
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
            // Trailers-only answers carry the status in the headers.
            if refused_by_tonic(resp.headers()) {
                resp.headers_mut().insert(
                    "grpc-status",
                    tonic::codegen::http::HeaderValue::from_static("3"),
                );
                this.metrics
                    .request(Outcome::Invalid, this.started.elapsed());
            }
            resp
        })
    }
}
