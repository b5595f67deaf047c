//! Runs the gRPC and admin servers on listeners bound by the caller, with one
//! shutdown path that every task obeys: health goes NOT_SERVING, the servers
//! stop accepting, in-flight requests finish within a bounded grace period.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tracing::{info, warn};

use crate::admin::{self, AdminBounds, AdminState, HealthcheckPolicy};
use crate::application::App;
use crate::config::xds::XdsConfig;
use crate::console::Console;
use crate::quota::{self, QuotaOptions};
use crate::statsd::StatsdConfig;
use crate::tls::Tls;

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
    /// The reference's stats as Prometheus (`--reference-metrics-addr`),
    /// and the mapping that names them.
    pub reference_metrics: Option<(TcpListener, Arc<crate::reference_metrics::Mapper>)>,
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
    /// How long shutdown keeps serving, not ready, before the GOAWAY.
    pub delay: Duration,
    /// Longest drain of in-flight requests after the GOAWAY.
    pub grace: Duration,
    /// Largest gRPC request message accepted (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// TLS (or mutual TLS) on the gRPC listener; plain TCP when `None`.
    pub tls: Option<Arc<Tls>>,
    /// Reload the rules when their directory changes (SIGHUP always reloads).
    pub watch_config: bool,
    /// Bounds of the gRPC listener.
    pub grpc: GrpcBounds,
    /// Bounds and access rules of the admin listener.
    pub admin: AdminBounds,
    /// What `GET /healthcheck` requires.
    pub healthcheck: HealthcheckPolicy,
    /// Send the reference's stats over UDP.
    pub statsd: Option<StatsdConfig>,
    /// Take the rules from an xDS management server instead of files.
    pub xds: Option<XdsConfig>,
    /// Bounds and timings of the quota (RLQS) service.
    pub quota: QuotaOptions,
    /// The operator's console (the limiter tells it of over-limit keys).
    pub console: Arc<Console>,
}

/// Serves until `shutdown` resolves or `token` is cancelled, then drains for
/// at most `opts.grace`. Background tasks (sweeper, config watcher, ...) run
/// in one task set that obeys the same token and is awaited before returning.
pub async fn run(
    listeners: Listeners,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
    opts: ServeOptions,
    token: CancellationToken,
) -> Result<(), ServeError> {
    let draining = Arc::new(AtomicBool::new(false));
    let (health, stopper) = health(shutdown, opts.delay, draining.clone(), token.clone()).await;
    let console = opts.console.clone();
    let tasks = tasks::spawn(&app, &opts, &console, &token);
    tasks::reference_metrics(&tasks, listeners.reference_metrics, &app, &opts, &token);
    info!(
        grpc_addr = %listeners.grpc.describe()?,
        admin_addr = %admin_addrs(&listeners.admin)?,
        config = %app.rules.dir().display(),
        store = app.store.health().backend,
        "sluice listening"
    );
    let router = grpc::router(&app, health, &opts, &token);
    let grpc = grpc::serve(listeners.grpc, router, &opts, &app.metrics, &token);
    let counters = Arc::new(crate::counters::Counters {
        token: crate::counters::AdminToken::new(opts.admin.access.token_file.clone()),
        stats: Arc::default(),
    });
    app.metrics.register(Box::new(counters.stats.clone()));
    let state = AdminState {
        app,
        draining,
        access: Arc::new(opts.admin.access.clone()),
        healthcheck: opts.healthcheck,
        console,
        counters,
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
        .map(|_| ())
    };
    let result = drain(servers, opts.grace, &token).await;
    token.cancel();
    tasks.close();
    tasks.wait().await;
    let _ = stopper.await;
    result
}

/// Health `SERVING` now, and the task that turns it (and `/readyz`) to
/// `NOT_SERVING` when `shutdown` resolves, keeps serving for `delay` (every
/// connection as before: a client that has not yet heard the endpoint is
/// gone still gets its answers, where a GOAWAY now would race its requests
/// and a closed listener refuse its next connection), then cancels `token`:
/// the GOAWAY and the drain.
async fn health(
    shutdown: impl Future<Output = ()> + Send + 'static,
    delay: Duration,
    draining: Arc<AtomicBool>,
    token: CancellationToken,
) -> (HealthServer<impl Health>, tokio::task::JoinHandle<()>) {
    let (reporter, health) = tonic_health::server::health_reporter();
    for name in ["", SERVICE_NAME, quota::SERVICE_NAME] {
        reporter
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let stopper = tokio::spawn(async move {
        let asked = tokio::select! {
            () = shutdown => true,
            () = token.cancelled() => false,
        };
        info!(
            delay_seconds = delay.as_secs_f64(),
            "shutdown started: health NOT_SERVING, serving until the delay ends, then draining in-flight requests"
        );
        draining.store(true, Ordering::Relaxed);
        for name in ["", SERVICE_NAME, quota::SERVICE_NAME] {
            reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        if asked {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = token.cancelled() => {}
            }
        }
        token.cancel();
    });
    (health, stopper)
}

/// Runs `servers` until they end, or, once `token` is cancelled, for at most
/// `grace` more.
async fn drain(
    servers: impl Future<Output = Result<(), ServeError>>,
    grace: Duration,
    token: &CancellationToken,
) -> Result<(), ServeError> {
    tokio::pin!(servers);
    tokio::select! {
        r = &mut servers => r,
        () = token.cancelled() => {
            match tokio::time::timeout(grace, &mut servers).await {
                Ok(r) => r,
                Err(_) => {
                    warn!(grace_seconds = grace.as_secs_f64(), "drain took longer than the grace period; exiting");
                    Ok(())
                }
            }
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

mod bounds;
mod edge;
mod grpc;
mod prune;
mod rls;
mod tasks;
pub use bounds::{BodyBounds, GrpcBounds};

/// The admin addresses for the startup line: the first alone, or a comma
/// list (the first is the one tests and operators read).
fn admin_addrs(listeners: &[TcpListener]) -> std::io::Result<String> {
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()?;
    Ok(addrs.join(","))
}
