//! The admin HTTP server: health, readiness, metrics, the active rules, and a
//! JSON door to the same decision path as gRPC.
//!
//! - `GET /healthz`: 200 `OK` while the process serves.
//! - `GET /readyz`: JSON with the overall status, the store and the config.
//! - `GET /metrics`: Prometheus text.
//! - `GET /rlconfig`: the active rules, one per line, sorted.
//! - `POST /json`: protojson `RateLimitRequest` in, `RateLimitResponse` out.
//! - `POST /reload`: load the config directory again and say what happened.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;

use crate::config::Reload;
use crate::protojson;
use crate::service::{RateLimiter, ServiceError};

/// What the admin handlers share.
#[derive(Clone)]
pub struct AdminState {
    pub limiter: RateLimiter,
    /// Set once shutdown starts: `/readyz` then answers 503 so load balancers
    /// stop sending before the process goes.
    pub draining: Arc<AtomicBool>,
}

/// The admin routes, without a listener (tests can call them directly).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "OK" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/rlconfig", get(rlconfig))
        .route("/json", post(json_decide))
        .route("/reload", post(reload))
        .with_state(state)
}

/// Serves the admin routes on `listener` until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let store = s.limiter.store().health();
    let config = s.limiter.rules().status();
    let loaded = s.limiter.rules().current();
    let draining = s.draining.load(Ordering::Relaxed);
    let status = match (draining, store.healthy) {
        (true, _) => "shutting_down",
        (false, true) => "ready",
        (false, false) => "degraded",
    };
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
            "dir": s.limiter.rules().dir().display().to_string(),
            "generation": config.generation,
            "domains": domains,
            "last_error": config.last_error,
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
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.limiter.metrics().render(),
    )
        .into_response()
}

async fn rlconfig(State(s): State<AdminState>) -> String {
    let mut out = s.limiter.rules().current().rules.dump().join("\n");
    out.push('\n');
    out
}

async fn json_decide(State(s): State<AdminState>, body: Bytes) -> Response {
    let req = match protojson::parse_request(&body) {
        Ok(req) => req,
        Err(msg) => return (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response(),
    };
    match s.limiter.handle(req).await {
        Ok(resp) => {
            let code = if resp.overall_code == 2 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (code, axum::Json(protojson::render_response(&resp))).into_response()
        }
        Err(e @ ServiceError::Request(_)) => {
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
        Err(e @ ServiceError::Store(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
        }
    }
}

async fn reload(State(s): State<AdminState>) -> Response {
    let rules = s.limiter.rules().clone();
    match tokio::task::spawn_blocking(move || rules.reload("POST /reload")).await {
        Ok(Ok(Reload::Swapped {
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
        Ok(Ok(Reload::Unchanged { generation })) => {
            axum::Json(json!({"status": "unchanged", "generation": generation})).into_response()
        }
        Ok(Err(e)) => {
            let generation = s.limiter.rules().status().generation;
            let body =
                json!({"status": "rejected", "generation": generation, "error": e.to_string()});
            (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reload task failed: {e}\n"),
        )
            .into_response(),
    }
}
