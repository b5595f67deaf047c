//! The composition root: builds the rules, the store, the limiter and the
//! listeners from the command line's settings, and runs them until a signal,
//! with one bounded drain.

mod commands;
mod error;
mod listen;
mod store;

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use commands::{advise, bench, check, counters, health};
pub use error::AppError;
pub(crate) use error::Context;

use crate::application::App;
use crate::cli::{LogFormat, ServeArgs};
use crate::config::{LiveRules, LoadOptions};
use crate::metrics::Metrics;
use crate::server::{self, Listeners, ServeOptions};
use crate::statsd::{Mogrifier, StatsdConfig};
use crate::telemetry::Telemetry;
use crate::tls::Tls;

pub(crate) fn statsd_config(args: &ServeArgs) -> Result<Option<StatsdConfig>, AppError> {
    let Some(addr) = &args.statsd_addr else {
        return Ok(None);
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("--statsd-addr '{addr}' is not a reachable host:port"))?;
    Ok(Some(StatsdConfig {
        addr,
        interval: args.statsd_flush_interval,
        tags: args
            .statsd_tags
            .iter()
            .map(|t| t.trim().to_owned())
            .collect(),
        // The reference's DogStatsD mogrifiers, from its own variables.
        mogrifiers: Mogrifier::from_env().map_err(AppError::msg)?,
    }))
}

/// Logs on stderr, and traces over OTLP when asked for (inside the runtime:
/// the exporter needs it). Returns the tracer to flush at exit.
pub(crate) fn init_logging(args: &ServeArgs) -> Result<Option<Telemetry>, AppError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("--log-level '{}'", args.log_level))?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_ansi(false).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let endpoint = args.otlp_endpoint.as_deref();
    let wanted = endpoint.is_some() || std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let (telemetry, otel) = if wanted {
        let (t, layer) = Telemetry::start(endpoint, args.otlp_protocol.as_deref())?;
        (Some(t), Some(layer))
    } else {
        (None, None)
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(telemetry)
}

/// Serves; `notes` are said once logging is up (ratelimit mode's variables
/// that change nothing).
pub fn serve(args: ServeArgs, notes: &[String]) -> Result<ExitCode, AppError> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let telemetry = {
        let _inside = runtime.enter();
        init_logging(&args)?
    };
    for note in notes {
        info!("ratelimit mode: {note}");
    }
    let metrics = Arc::new(Metrics::with_limits(args.limits.metric_limits()));
    // Invalid rules at startup: fail before listening.
    let Some(rules) = load_rules(&args, &metrics) else {
        return Ok(ExitCode::FAILURE);
    };
    let tls = grpc_tls(&args)?;
    let result = runtime.block_on(run(args, rules, tls, metrics));
    if let Some(t) = telemetry {
        let _inside = runtime.enter();
        t.shutdown();
    }
    // A reload still running on a blocking thread (a huge or slow rule
    // directory) must not hold the exit past the grace period.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

/// The gRPC listener's certificates, read now so a bad file fails startup.
fn grpc_tls(args: &ServeArgs) -> Result<Option<Arc<Tls>>, AppError> {
    args.tls_files()
        .map(|files| Tls::new(files).map(Arc::new).context("--grpc-tls-*"))
        .transpose()
}

/// The rules from xDS (none until the first response) or from the directory;
/// `None` when the directory does not load (the errors are printed).
fn load_rules(args: &ServeArgs, metrics: &Arc<Metrics>) -> Option<Arc<LiveRules>> {
    let options = LoadOptions {
        leases: args.store.memcache_servers.is_empty(),
        ..args.config_args.load_options()
    };
    match &args.config_xds {
        Some(server) => {
            match LiveRules::for_xds(
                server,
                args.xds_overlay.as_deref(),
                options,
                metrics.clone(),
            ) {
                Ok(rules) => Some(Arc::new(rules)),
                Err(e) => {
                    eprintln!("--xds-overlay: {e}");
                    None
                }
            }
        }
        None => match LiveRules::load(&args.config, options, metrics.clone()) {
            Ok(rules) => Some(Arc::new(rules)),
            Err(e) => {
                eprintln!("{e}");
                None
            }
        },
    }
}

/// Binds every listener, then serves until SIGTERM or SIGINT.
async fn run(
    args: ServeArgs,
    rules: Arc<LiveRules>,
    tls: Option<Arc<Tls>>,
    metrics: Arc<Metrics>,
) -> Result<ExitCode, AppError> {
    let listeners = bind(&args).await?;
    let token = CancellationToken::new();
    serve_on(
        listeners,
        args,
        rules,
        tls,
        metrics,
        server::signal(),
        token,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

async fn bind(args: &ServeArgs) -> Result<Listeners, AppError> {
    Ok(Listeners {
        grpc: listen::bind_grpc(args).await?,
        admin: listen::bind_admin(&args.admin_addr).await?,
        reference_metrics: listen::bind_reference_metrics(args).await?,
    })
}

/// Builds the store and the limiter and serves on `listeners` until
/// `shutdown` resolves or `token` is cancelled, with the bounded drain
/// `server::run` owns.
async fn serve_on(
    listeners: Listeners,
    args: ServeArgs,
    rules: Arc<LiveRules>,
    tls: Option<Arc<Tls>>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    token: CancellationToken,
) -> Result<(), AppError> {
    let store = store::build(&args.store, &metrics)?;
    let console = Arc::new(args.limits.console());
    let app = App::new(
        rules.clone(),
        store,
        metrics.clone(),
        args.settings(),
        console.clone(),
    );
    for (domain, count) in rules.current().rules.summary() {
        info!(domain, rules = count, "domain loaded");
    }
    for line in args.quota.options().store_rate_shortfalls() {
        warn!("quota mode: {line}; entries may expire while Envoys hold shares");
    }
    let opts = ServeOptions {
        console,
        delay: args.shutdown_delay,
        grace: args.shutdown_grace,
        watch_config: !args.no_watch,
        max_request_bytes: args.limits.max_request_bytes,
        tls,
        grpc: args.conns.grpc(),
        admin: args.conns.admin(),
        healthcheck: args.healthcheck(),
        statsd: statsd_config(&args)?,
        quota: args.quota.options(),
        xds: args.xds(),
    };
    server::run(listeners, app, shutdown, opts, token).await?;
    if let Some(path) = &args.grpc_uds {
        // Ours, bound at startup: the next start finds no stale socket.
        let _ = std::fs::remove_file(path);
    }
    // The count lets an operator (and the shutdown test) check that every
    // request sluice decided was answered.
    info!(answered = metrics.requests_total(), "sluice stopped");
    Ok(())
}

/// A sluice serving inside this process (tests, embedding): where it
/// listens, and how to stop it.
pub struct Running {
    /// The gRPC listener's address (`None` on a Unix socket).
    pub grpc: Option<SocketAddr>,
    /// The first admin listener's address.
    pub admin: SocketAddr,
    token: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), AppError>>,
}

impl Running {
    /// Stops it (the same path as SIGTERM) and waits for the drain.
    pub async fn stop(self) -> Result<(), AppError> {
        self.token.cancel();
        self.task
            .await
            .map_err(|e| AppError::msg(format!("the server task: {e}")))?
    }
}

/// Starts what `args` describe on the current runtime, without logging setup
/// or signal handling: bind to port 0 and read the addresses back.
pub async fn start(args: ServeArgs) -> Result<Running, AppError> {
    let metrics = Arc::new(Metrics::with_limits(args.limits.metric_limits()));
    let rules =
        load_rules(&args, &metrics).ok_or_else(|| AppError::msg("the rules did not load"))?;
    let tls = grpc_tls(&args)?;
    let listeners = bind(&args).await?;
    let grpc = match &listeners.grpc {
        server::GrpcListener::Tcp(l) => Some(l.local_addr()?),
        #[cfg(unix)]
        server::GrpcListener::Unix(..) => None,
    };
    let admin = listeners
        .admin
        .first()
        .context("--admin-addr: no address")?
        .local_addr()?;
    let token = CancellationToken::new();
    let stopped = token.clone().cancelled_owned();
    let task = tokio::spawn(serve_on(
        listeners,
        args,
        rules,
        tls,
        metrics,
        stopped,
        token.clone(),
    ));
    Ok(Running {
        grpc,
        admin,
        token,
        task,
    })
}
