//! `GET /api/usage`: how keys really use each limit, and what a candidate
//! limit would refuse ([`crate::usage`]). Figures per rule, never a key.
//!
//! - no `domain`: every domain's rules;
//! - `domain=D`: D's rules, each with its usage quantiles and what its own
//!   limit refused;
//! - `domain=D&rule=PATH[&limit=L]`: that limit's windows for L (its own
//!   limit by default): keys, keys refused, requests refused.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AdminState;
use crate::refusal::Refusal;
use crate::usage::{domain_report, limit_report};

pub(super) async fn usage(
    State(s): State<AdminState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let now = crate::limiter::Now::wall_us() / 1_000_000;
    let loaded = s.app.rules.snapshot();
    let Some(name) = q.get("domain") else {
        let domains: Vec<_> = loaded
            .rules
            .domains()
            .into_iter()
            .map(|(name, d)| domain_report(name, d, now))
            .collect();
        return axum::Json(json!({"domains": domains})).into_response();
    };
    let Some(domain) = loaded.rules.domain(name) else {
        return Refusal::Invalid(format!("domain {name:?} has no rules loaded")).into_http();
    };
    let Some(path) = q.get("rule") else {
        return axum::Json(domain_report(name, domain, now)).into_response();
    };
    let limit = match q.get("limit").map(|l| l.parse::<u64>()) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(_)) => {
            return Refusal::Invalid("limit: a whole number".into()).into_http();
        }
    };
    let Some(rule) = domain
        .rules()
        .iter()
        .find(|r| *r.label == **path || *r.path == **path)
    else {
        return Refusal::Invalid(format!("domain {name:?} has no rule {path:?}")).into_http();
    };
    match limit_report(rule, limit, now) {
        Some(doc) => axum::Json(doc).into_response(),
        None => {
            Refusal::Invalid(format!("rule {path:?} is unlimited: nothing to refuse")).into_http()
        }
    }
}
