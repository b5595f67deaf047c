//! The admin HTTP server: health, readiness, metrics, the active rules, and a
//! JSON door to the same decision path as gRPC.
//!
//! - `GET /`: the console (HTML; its script and style at `/console.js` and
//!   `/console.css`), reading `GET /api/console` (JSON).
//! - `GET /healthz`: 200 `OK` while the process serves.
//! - `GET /readyz`: JSON with the overall status, the store and the config.
//! - `GET /healthcheck`: the reference's probe (200 `OK` or 500), see
//!   [`HealthcheckPolicy`].
//! - `GET /metrics`: Prometheus text.
//! - `GET /rlconfig`: the active rules, one per line, sorted.
//! - `POST /json`: protojson `RateLimitRequest` in, `RateLimitResponse` out.
//! - `POST /reload`: load the config directory again and say what happened.
//! - `POST /api/counters`, `POST /api/counters/reset`, `GET /api/counters/top`:
//!   look a client's counters up, reset them, who is refused now
//!   ([`counters`]; the token of `--admin-token-file`, or loopback only).
//! - `GET /api/usage`: how keys use each limit, and what a limit would refuse.
//!
//! The port serves operators and probes, and the console for operators only: a request whose
//! `Host` is not an address, `localhost` or an `--admin-allowed-hosts` name
//! (DNS rebinding), or a POST that a cross-site form or `fetch` could send
//! (an `Origin` from elsewhere, a form or `text/plain` body) is refused with
//! 403. Connections are capped, idle ones closed, and a request's headers
//! must arrive within `--admin-header-timeout`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod access;
mod counters;
mod usage;

use crate::application::App;
use crate::config::Reload;
use crate::conn::{self, ConnBounds, Guarded, IdleBy};
use crate::console::{self, Console};
use crate::counters::Counters;
use crate::metrics::Listener;
use crate::protojson;
use crate::refusal::Refusal;
use access::guard;

/// What the admin handlers share.
#[derive(Clone)]
pub struct AdminState {
    pub app: App,
    /// Set once shutdown starts: `/readyz` then answers 503 so load balancers
    /// stop sending before the process goes.
    pub draining: Arc<AtomicBool>,
    pub access: Arc<AdminAccess>,
    pub healthcheck: HealthcheckPolicy,
    /// What the console page shows.
    pub console: Arc<Console>,
    /// The counters endpoints' token and numbers.
    pub(crate) counters: Arc<Counters>,
}

/// What `GET /healthcheck` requires besides not shutting down, as the
/// reference's health checker does: the store has answered once since start
/// (a store down later keeps it passing, since the failure policy still
/// answers), and optionally rules loaded and the store up right now.
#[derive(Debug, Clone, Copy, Default)]
pub struct HealthcheckPolicy {
    /// Fail until at least one domain is loaded (the reference's
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub needs_rules: bool,
    /// Fail while the store is down, not only before it first answered
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
    pub needs_store_now: bool,
}

/// Who may talk to the admin port, beyond loopback addresses.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    /// Host names accepted in `Host` besides IP addresses and `localhost`
    /// (`--admin-allowed-hosts`), lowercase.
    pub allowed_hosts: Vec<String>,
    /// The counters endpoints' token (`--admin-token-file`).
    pub token_file: Option<std::path::PathBuf>,
}

/// Bounds of the admin listener.
#[derive(Debug, Clone)]
pub struct AdminBounds {
    pub conn: ConnBounds,
    /// Longest time for a request's headers to arrive.
    pub header_timeout: Duration,
    pub access: AdminAccess,
}

impl Default for AdminBounds {
    fn default() -> Self {
        AdminBounds {
            conn: ConnBounds {
                max_connections: 64,
                max_per_peer: 64,
                handshake_timeout: Duration::from_secs(5),
                max_in_flight_per_peer: 0,
                idle_timeout: Duration::from_secs(30),
                write_stall: Duration::from_secs(30),
            },
            header_timeout: Duration::from_secs(5),
            access: AdminAccess::default(),
        }
    }
}

/// The admin routes, without a listener (tests can call them directly).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/", get(console_page))
        .route("/console.js", get(console_script))
        .route("/console.css", get(console_style))
        .route("/api/console", get(console_api))
        .route("/healthz", get(|| async { "OK" }))
        .route("/healthcheck", get(healthcheck))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/rlconfig", get(rlconfig))
        .route("/json", post(json_decide))
        .route("/reload", post(reload))
        .route("/api/counters", post(counters::lookup))
        .route("/api/counters/reset", post(counters::reset))
        .route("/api/counters/top", get(counters::top))
        .route("/api/usage", get(usage::usage))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Serves the admin routes on `listener` until `token` is cancelled, then
/// lets requests in flight finish (the caller bounds that wait).
pub async fn run(
    listener: TcpListener,
    state: AdminState,
    limits: AdminBounds,
    token: CancellationToken,
) -> std::io::Result<()> {
    let metrics = state.app.metrics.clone();
    serve_bounded(listener, router(state), limits, metrics, token).await
}

/// Serves `app` on `listener` under the admin port's bounds (connections,
/// per peer, idle and header timeouts): every HTTP listener sluice opens
/// beside gRPC is held to them.
pub(crate) async fn serve_bounded(
    listener: TcpListener,
    app: Router,
    limits: AdminBounds,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    token: CancellationToken,
) -> std::io::Result<()> {
    let mut admitted = conn::accept(
        listener,
        limits.conn,
        Listener::Admin,
        metrics,
        token.clone(),
    );
    let tracker = TaskTracker::new();
    loop {
        let (stream, ticket) = tokio::select! {
            () = token.cancelled() => break,
            next = admitted.recv() => match next {
                Some(a) => a,
                None => break,
            },
        };
        let peer = stream.peer_addr().ok();
        let io = Guarded::new(stream, ticket, limits.conn, IdleBy::Reads);
        // Every request knows its peer (the counters endpoints admit
        // loopback peers when no token is configured).
        let routes = match peer {
            Some(p) => app.clone().layer(axum::Extension(counters::Peer(p))),
            None => app.clone(),
        };
        let svc = TowerToHyperService::new(routes);
        let token = token.clone();
        let header_timeout = limits.header_timeout;
        tracker.spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = http.serve_connection(TokioIo::new(io), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = token.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// `ready`, `degraded` (the store is down) or `shutting_down`.
fn overall(s: &AdminState, store_healthy: bool) -> &'static str {
    match (s.draining.load(Ordering::Relaxed), store_healthy) {
        (true, _) => "shutting_down",
        (false, true) => "ready",
        (false, false) => "degraded",
    }
}

/// The console's assets: no script or style from anywhere but this port, and
/// no framing, so the page cannot be turned against its operator.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn console_page() -> Response {
    asset("text/html; charset=utf-8", console::PAGE)
}

async fn console_script() -> Response {
    asset("text/javascript; charset=utf-8", console::SCRIPT)
}

async fn console_style() -> Response {
    asset("text/css; charset=utf-8", console::STYLE)
}

async fn console_api(State(s): State<AdminState>) -> Response {
    let status = overall(&s, s.app.store.health().healthy);
    axum::Json(console::document(&s.console, &s.app, status)).into_response()
}

/// The reference's probe: 200 `OK`, or 500 with the reason.
async fn healthcheck(State(s): State<AdminState>) -> Response {
    match unhealthy(&s) {
        None => (StatusCode::OK, "OK").into_response(),
        Some(why) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")).into_response(),
    }
}

fn unhealthy(s: &AdminState) -> Option<&'static str> {
    let store = s.app.store.health();
    let policy = s.healthcheck;
    if s.draining.load(Ordering::Relaxed) {
        Some("shutting down")
    } else if !store.reached {
        Some("the store has not answered yet")
    } else if policy.needs_store_now && !store.healthy {
        Some("the store is down")
    } else if policy.needs_rules && s.app.rules.current().rules.summary().is_empty() {
        Some("no rules loaded yet")
    } else {
        None
    }
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let store = s.app.store.health();
    let config = s.app.rules.status();
    let loaded = s.app.rules.current();
    let draining = s.draining.load(Ordering::Relaxed);
    let status = overall(&s, store.healthy);
    let domains: Vec<_> = loaded
        .rules
        .summary()
        .into_iter()
        .map(|(domain, rules)| json!({"domain": domain, "rules": rules}))
        .collect();
    let body = json!({
        "status": status,
        "store": {"backend": store.backend, "in_use": store.in_use, "healthy": store.healthy, "detail": store.detail},
        "config": {
            "source": if s.app.rules.xds_server().is_some() { "xds" } else { "files" },
            "dir": s.app.rules.dir().display().to_string(),
            "xds_server": s.app.rules.xds_server(),
            "version": config.version,
            "generation": config.generation,
            "domains": domains,
            "last_error": config.last_error,
        },
        // Quota mode: Envoy streams open here, and what sizes their shares
        // (the store, or the failure policy while it is down).
        "quota": {
            "streams": s.app.metrics.quota_streams(),
            "shares_from": store.in_use,
            "learning_seconds_left": s.app.metrics.quota_learning_left(),
        },
    });
    // A degraded limiter still answers: only shutdown takes it out of rotation.
    let code = if draining {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(body)).into_response()
}

async fn metrics(State(s): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        s.app.metrics.render(),
    )
        .into_response()
}

async fn rlconfig(State(s): State<AdminState>) -> String {
    let mut out = s.app.rules.current().rules.dump().join("\n");
    out.push('\n');
    out
}

async fn json_decide(State(s): State<AdminState>, body: Bytes) -> Response {
    let req = match protojson::parse_request(&body) {
        Ok(req) => req,
        Err(msg) => return Refusal::Invalid(msg).into_http(),
    };
    match s.app.limiter.handle(req).await {
        Ok(resp) => {
            let code = if resp.overall_code == 2 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (code, axum::Json(protojson::render_response(&resp))).into_response()
        }
        Err(e) => Refusal::from(e).into_http(),
    }
}

async fn reload(State(s): State<AdminState>) -> Response {
    let rules = s.app.rules.clone();
    match crate::config::watch::reload_behind(rules, "POST /reload").await {
        Some(Ok(Reload::Swapped {
            generation,
            domains,
            changes,
        })) => {
            let domains: Vec<_> = domains
                .iter()
                .map(|(d, n)| json!({"domain": d, "rules": n}))
                .collect();
            let body = json!({"status": "reloaded", "generation": generation, "changes": changes, "domains": domains});
            axum::Json(body).into_response()
        }
        Some(Ok(Reload::Unchanged { generation })) => {
            axum::Json(json!({"status": "unchanged", "generation": generation})).into_response()
        }
        Some(Err(e)) => {
            let generation = s.app.rules.status().generation;
            let body =
                json!({"status": "rejected", "generation": generation, "error": e.to_string()});
            (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response()
        }
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the reload thread could not run\n",
        )
            .into_response(),
    }
}
