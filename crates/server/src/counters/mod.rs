//! Counters for operators and applications: what a client's descriptors
//! meet now and why (the rule each matched and how, every limit's count,
//! what remains, when it resets, whether the next request is refused),
//! spending nothing; a reset of those counters on every store; and the
//! clients refused most lately, in clear. Each answer is for the authorised
//! only ([`auth`]), logged and counted ([`stats`]).
//!
//! The request is the same JSON as `POST /json`; values are normalised and
//! hashed as a request's are, so an operator types an email address and the
//! lookup finds its hashed counter.

pub(crate) mod auth;
pub mod client;
pub(crate) mod stats;

use serde_json::{Value, json};
use tracing::info;

use crate::application::App;
use crate::config::{Explanation, How};
use crate::limiter::{Decision, Tally};
use crate::service::{Peeked, PeekedDescriptor, PeekedLimit, ServiceError};
use crate::store::Store;

pub(crate) use auth::{AdminToken, Caller};
pub(crate) use stats::CounterStats;

/// Why a lookup or reset gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CountersError {
    /// The body, the domain or the descriptors (400).
    #[error("{0}")]
    Invalid(String),
    /// The store could not be asked (503), in its own words.
    #[error("{0}")]
    Store(String),
}

impl From<CountersError> for crate::refusal::Refusal {
    fn from(e: CountersError) -> Self {
        match e {
            CountersError::Invalid(why) => Self::Invalid(why),
            CountersError::Store(why) => Self::Unavailable(why),
        }
    }
}

impl From<ServiceError> for CountersError {
    fn from(e: ServiceError) -> CountersError {
        match e {
            ServiceError::Request(e) => CountersError::Invalid(e.to_string()),
            ServiceError::Store(e) => CountersError::Store(e.to_string()),
            e @ ServiceError::NoRulesYet => CountersError::Store(e.to_string()),
        }
    }
}

/// What the counters endpoints share.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) token: AdminToken,
    pub(crate) stats: std::sync::Arc<CounterStats>,
}

/// Looks `body` (protojson `RateLimitRequest`) up; spends nothing.
pub(crate) async fn lookup(app: &App, body: &[u8]) -> Result<(Peeked, Value), CountersError> {
    let req = crate::protojson::parse_request(body).map_err(CountersError::Invalid)?;
    // A descriptor with no entries meets no limit: asking for it is a
    // mistake to name, never a reset that quietly does nothing.
    if let Some(i) = req.descriptors.iter().position(|d| d.entries.is_empty()) {
        return Err(CountersError::Invalid(format!(
            "descriptor {} has no entries: give at least one key and value",
            i + 1
        )));
    }
    let req = app.limiter.counters_request(req)?;
    let peeked = app.limiter.peek(req).await?;
    if !peeked.domain_known {
        return Err(CountersError::Invalid(format!(
            "domain {:?} has no rules loaded",
            peeked.request.domain
        )));
    }
    let doc = document(app.store.as_ref(), &peeked);
    Ok((peeked, doc))
}

/// Empties every counter `body`'s descriptors use; answers what each held,
/// and how many were emptied (`counters_reset`, `reset` false when none).
pub(crate) async fn reset(
    app: &App,
    counters: &Counters,
    body: &[u8],
    caller: &Caller,
) -> Result<Value, CountersError> {
    let (peeked, mut doc) = lookup(app, body).await?;
    app.limiter
        .reset(&peeked)
        .await
        .map_err(|e| CountersError::Store(e.to_string()))?;
    for d in peeked.descriptors.iter().filter(|d| !d.limits.is_empty()) {
        for l in &d.limits {
            counters.stats.reset(&peeked.request.domain, &l.rule);
        }
        info!(
            caller = caller.id(),
            domain = %peeked.request.domain,
            descriptor = %masked(&d.entries),
            counts_before = %counts(&d.limits),
            "counters reset"
        );
    }
    // What a script tests: how many counters were emptied (0: the
    // descriptors met no limit, and the endpoint answers 404).
    let emptied: usize = peeked.descriptors.iter().map(|d| d.limits.len()).sum();
    if let Some(o) = doc.as_object_mut() {
        o.insert("reset".into(), Value::Bool(emptied > 0));
        o.insert("counters_reset".into(), emptied.into());
        if emptied == 0 {
            o.insert(
                "error".into(),
                "the descriptors meet no limit: nothing was reset".into(),
            );
        }
    }
    Ok(doc)
}

/// The lookup as JSON.
fn document(store: &dyn Store, p: &Peeked) -> Value {
    let domain = p.rules.rules.domain(&p.request.domain);
    let store = store.health();
    let descriptors: Vec<Value> = p
        .descriptors
        .iter()
        .map(|d| {
            let why = domain.map(|dom| dom.explain(&d.entries));
            descriptor(d, why.as_ref())
        })
        .collect();
    json!({
        "domain": p.request.domain,
        "store": {"backend": store.backend, "in_use": store.in_use, "healthy": store.healthy},
        "descriptors": descriptors,
    })
}

fn descriptor(d: &PeekedDescriptor, why: Option<&Explanation<'_>>) -> Value {
    let entries: Vec<Value> = d
        .entries
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect();
    let steps: Vec<Value> = why
        .map(|w| {
            w.steps
                .iter()
                .map(|s| match &s.how {
                    How::Wildcard(p) => json!({"key": s.key, "how": s.how.name(), "pattern": p}),
                    how => json!({"key": s.key, "how": how.name()}),
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "entries": entries,
        "match": {
            "rule": why.and_then(|w| w.rule).map(|r| r.path.to_string()),
            "steps": steps,
            "why_none": why.and_then(|w| w.why_none.clone()),
        },
        "unlimited": d.unlimited,
        "limits": d.limits.iter().map(limit).collect::<Vec<_>>(),
    })
}

/// One limit: its count now, what remains, when it resets, and whether a
/// request of one hit would be refused (`over_limit`; shadow mode still
/// lets it pass).
fn limit(l: &PeekedLimit) -> Value {
    let (count, decided_by) = match l.tally {
        Tally::Count(c) | Tally::Slots { held: c, .. } => (Some(c), "store"),
        Tally::Moved(c) => (Some(c), "store (the window of its clock)"),
        Tally::Sliding { current, .. } => (Some(current), "store"),
        // Tokens taken from a full bucket.
        Tally::Bucket { .. } => (
            Some(u64::from(
                l.burst
                    .unwrap_or(l.limit)
                    .saturating_sub(l.status.remaining),
            )),
            "store",
        ),
        Tally::Remembered(c) => (Some(c), "local over-limit cache"),
        Tally::Leased(c) => (Some(c), "this instance's leased allowance"),
        Tally::Decided(Decision::Admit) => (None, "failure policy: admit"),
        Tally::Decided(Decision::Refuse) => (None, "failure policy: refuse"),
    };
    let mut v = json!({
        "rule": l.rule,
        "name": l.name,
        "shape": l.shape,
        "limit": l.limit,
        "burst": l.burst,
        "window_seconds": l.window_seconds,
        "count": count,
        "remaining": l.status.remaining,
        "reset_seconds": l.status.reset_seconds,
        "over_limit": l.status.remaining == 0,
        "shadow_mode": l.shadow_mode,
        "decided_by": decided_by,
    });
    if let (Tally::Sliding { previous, .. }, Some(o)) = (l.tally, v.as_object_mut()) {
        o.insert("previous_window_count".into(), previous.into());
    }
    v
}

/// A descriptor as logs show it: addresses masked (email values are hashed
/// already).
pub(crate) fn masked(entries: &[(String, String)]) -> String {
    entries
        .iter()
        .map(|(k, v)| {
            let shown = crate::console::address::mask(k, v).unwrap_or_else(|| v.clone());
            format!("{k}={shown}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn counts(limits: &[PeekedLimit]) -> String {
    limits
        .iter()
        .map(|l| match l.tally {
            Tally::Count(c)
            | Tally::Moved(c)
            | Tally::Sliding { current: c, .. }
            | Tally::Slots { held: c, .. } => {
                format!("{}={c}", l.rule)
            }
            _ => format!("{}=-", l.rule),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
