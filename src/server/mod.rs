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

use crate::admin::{self, AdminLimits, AdminState, HealthcheckPolicy};
use crate::config::watch;
use crate::config::xds::{self, XdsConfig};
use crate::conn::{self, BodyBudget, ConnLimits, Guarded, IdleBy, Watch};
use crate::console::{self, Console};
use crate::limiter::Now;
use crate::metrics::Listener;
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
    /// The admin routes on each (`--admin-addr`, repeatable: the reference's
    /// `PORT`, `DEBUG_PORT` and `PROMETHEUS_ADDR` under `ratelimit`); at
    /// least one.
    pub admin: Vec<TcpListener>,
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
    /// What `GET /healthcheck` requires.
    pub healthcheck: HealthcheckPolicy,
    /// Send the reference's stats over UDP.
    pub statsd: Option<StatsdConfig>,
    /// Take the rules from an xDS management server instead of files.
    pub xds: Option<XdsConfig>,
    /// Bounds and timings of the quota (RLQS) service.
    pub quota: QuotaOptions,
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
        admin_addr = %admin_addrs(&listeners.admin)?,
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
    let state = AdminState {
        limiter,
        draining,
        access: Arc::new(opts.admin.access.clone()),
        healthcheck: opts.healthcheck,
        console,
    };
    let admin = futures_util::future::try_join_all(
        listeners
            .admin
            .into_iter()
            .map(|l| admin::run(l, state.clone(), opts.admin.clone(), token.clone())),
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

mod guard;
mod limits;
use guard::Guard;
pub use limits::{BodyLimits, GrpcLimits};

/// The admin addresses for the startup line: the first alone, or a comma
/// list (the first is the one tests and operators read).
fn admin_addrs(listeners: &[TcpListener]) -> std::io::Result<String> {
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()?;
    Ok(addrs.join(","))
}
