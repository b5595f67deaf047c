//! The counters endpoints ([`crate::counters`]) on the admin port:
//!
//! - `POST /api/counters`: what descriptors meet now and why; spends nothing.
//! - `POST /api/counters/reset`: empties those counters; answers what they
//!   held and how many (404 when the descriptors meet no limit).
//! - `GET /api/counters/top`: the keys most often refused lately, in clear
//!   with a lookup ready for each; masked, as the console shows them, to a
//!   caller without the token.
//!
//! Each call is authorised first (401 otherwise, counted), and logged.

use std::net::SocketAddr;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::AdminState;
use crate::counters::{self, Caller, CountersError};
use crate::refusal::Refusal;

/// The peer of an admin connection, set on every request it carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// Keys `GET /api/counters/top` lists at most.
const TOP: usize = 20;

fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The caller, or the 401 that refuses it (counted and logged).
#[allow(
    clippy::result_large_err,
    reason = "the refusal is the handler's answer, returned at once"
)]
async fn authorise(
    s: &AdminState,
    h: &HeaderMap,
    peer: Option<Extension<Peer>>,
    what: &str,
) -> Result<Caller, Response> {
    let peer = peer.map(|Extension(Peer(p))| p);
    let checked = s.counters.token.authorise(bearer(h), peer).await;
    checked.map_err(|why| {
        s.counters.stats.refused();
        warn!(peer = %peer.map_or_else(|| "unknown".into(), |p| p.ip().to_string()), endpoint = what, reason = %why, "counters request refused");
        Refusal::Unauthenticated(why.to_string()).into_http()
    })
}

fn failed(e: CountersError) -> Response {
    crate::refusal::Refusal::from(e).into_http()
}

pub(super) async fn lookup(
    State(s): State<AdminState>,
    peer: Option<Extension<Peer>>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match authorise(&s, &h, peer, "/api/counters").await {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    s.counters.stats.lookup();
    match counters::lookup(&s.app, &body).await {
        Ok((peeked, doc)) => {
            let shown: Vec<String> = peeked
                .descriptors
                .iter()
                .map(|d| counters::masked(&d.entries))
                .collect();
            info!(caller = caller.id(), domain = %peeked.request.domain, descriptors = ?shown, "counters looked up");
            axum::Json(doc).into_response()
        }
        Err(e) => failed(e),
    }
}

pub(super) async fn reset(
    State(s): State<AdminState>,
    peer: Option<Extension<Peer>>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match authorise(&s, &h, peer, "/api/counters/reset").await {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    s.counters.stats.lookup();
    match counters::reset(&s.app, &s.counters, &body, &caller).await {
        // A reset that met no limit is not a success a script could
        // mistake: 404, with the lookup saying why.
        Ok(doc) if doc.get("reset") == Some(&Value::Bool(false)) => {
            (StatusCode::NOT_FOUND, axum::Json(doc)).into_response()
        }
        Ok(doc) => axum::Json(doc).into_response(),
        Err(e) => failed(e),
    }
}

pub(super) async fn top(
    State(s): State<AdminState>,
    peer: Option<Extension<Peer>>,
    h: HeaderMap,
) -> Response {
    let now = crate::limiter::Now::wall_us() / 1_000_000;
    let keys = s.console.top_keys(TOP, now);
    // A token offered must be right (401 otherwise); without one, what the
    // console shows anyone: masked keys (in clear from loopback when no
    // token is configured).
    let caller = if bearer(&h).is_some() {
        match authorise(&s, &h, peer, "/api/counters/top").await {
            Ok(c) => c,
            Err(refused) => return refused,
        }
    } else {
        let peer = peer.map(|Extension(Peer(p))| p);
        let Ok(caller) = s.counters.token.authorise(None, peer).await else {
            let masked: Vec<Value> = keys
                .iter()
                .map(|k| json!({"key": k.key, "over_limit": k.over_limit}))
                .collect();
            return axum::Json(json!({"clear": false, "keys": masked})).into_response();
        };
        caller
    };
    info!(
        caller = caller.id(),
        keys = keys.len(),
        "top refused keys read in clear"
    );
    let clear: Vec<Value> = keys
        .iter()
        .map(|k| {
            let c = &k.clear;
            let entries: Vec<Value> = c
                .entries
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect();
            let flag: Vec<String> = c.entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
            json!({
                "domain": c.domain,
                "rule": c.rule,
                "entries": entries,
                "over_limit": k.over_limit,
                "lookup": {"domain": c.domain, "descriptors": [{"entries": entries}]},
                "command": format!("sluice counters show --domain {} --descriptor '{}'", c.domain, flag.join(",")),
            })
        })
        .collect();
    axum::Json(json!({"clear": true, "keys": clear})).into_response()
}
