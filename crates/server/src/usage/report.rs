//! The usage answers as JSON: every limit of a domain with its quantiles
//! and what its own limit refused (`GET /api/usage?domain=D`), and one
//! limit's windows for a candidate limit L (`&rule=PATH&limit=L`).

use serde_json::{Value, json};

use super::history::{Period, SLOTS, period_of};
use super::query::{keys_refused, max, pooled, quantile, requests_refused};
use crate::config::{Domain, LimitDef, Rule};

/// Periods read: the last hour, and at least 24 windows.
fn periods_kept(window_s: u64) -> u64 {
    (3600 / period_of(window_s)).clamp(24, SLOTS as u64)
}

/// The limit usage is held against, and the window. A token bucket's usage
/// is the tokens a key took per window (asked, in shadow mode), held
/// against its rate per window: what a key can sustain (its burst lets one
/// window's worth over the rate pass now and then, so near the rate the
/// figures are at most whom it refuses).
fn limited(r: &Rule) -> Option<(u64, u64)> {
    match r.limit {
        LimitDef::Limited {
            period,
            requests_per_unit,
            ..
        } => Some((u64::from(requests_per_unit), period.seconds())),
        LimitDef::Unlimited => None,
    }
}

fn history(r: &Rule, window_s: u64, now: u64) -> Vec<Period> {
    r.stats.usage.periods(window_s, now, periods_kept(window_s))
}

/// The distribution itself, for a chart and for summing over instances:
/// `[level, keys that reached it]`, up to the last level any did.
pub(super) fn distribution(keys: &[i64]) -> Vec<Value> {
    let last = keys.iter().rposition(|n| *n != 0).map_or(0, |i| i + 1);
    keys.iter()
        .take(last)
        .enumerate()
        .map(|(i, n)| json!([super::levels::level(i), n]))
        .collect()
}

/// What `limit` refused: keys and requests.
pub(super) fn refused_by(keys: &[i64], limit: u64) -> Value {
    json!({"keys": keys_refused(keys, limit), "requests": requests_refused(keys, limit)})
}

/// The quantiles of the per-key peak, and the limits that would refuse
/// 0.1%, 1% and 5% of keys.
pub(super) fn summary(keys: &[i64]) -> Value {
    json!({
        "keys": keys.first().copied().unwrap_or(0),
        "p50": quantile(keys, 0.5), "p90": quantile(keys, 0.9),
        "p99": quantile(keys, 0.99), "p999": quantile(keys, 0.999), "max": max(keys),
        "limit_refusing": {"0.1%": quantile(keys, 0.999), "1%": quantile(keys, 0.99), "5%": quantile(keys, 0.95)},
    })
}

/// Every limit of `domain`: its shape, its quantiles over the kept
/// periods, and what its own limit refused there.
pub(crate) fn domain_report(name: &str, domain: &Domain, now: u64) -> Value {
    let rules: Vec<Value> = domain
        .rules()
        .iter()
        .filter_map(|r| {
            let (limit, window) = limited(r)?;
            let periods = history(r, window, now);
            // Rules with no history are left out: the report stays within
            // --max-usage-rules however many rules are configured.
            if periods.is_empty() {
                return None;
            }
            let keys = pooled(&periods);
            Some(json!({
                "rule": &*r.label,
                "name": r.name.as_deref(),
                "limit": limit,
                "window_seconds": window,
                "period_seconds": period_of(window),
                "periods": periods.len(),
                "hits": periods.iter().map(|p| p.hits).sum::<u64>(),
                "usage": summary(&keys),
                "refused_by_limit": refused_by(&keys, limit),
                "shadow_mode": r.shadow_mode,
                "at_least": distribution(&keys),
            }))
        })
        .collect();
    json!({"domain": name, "now": now, "rules": rules})
}

/// One limit's periods for a candidate `limit` (its own when `None`).
pub(crate) fn limit_report(rule: &Rule, limit: Option<u64>, now: u64) -> Option<Value> {
    let (own, window) = limited(rule)?;
    let l = limit.unwrap_or(own);
    let periods = history(rule, window, now);
    let windows: Vec<Value> = periods
        .iter()
        .map(|p| {
            json!({
                "start": p.start, "seconds": p.seconds,
                "keys": p.keys.first().copied().unwrap_or(0), "hits": p.hits,
                "keys_refused": keys_refused(&p.keys, l),
                "requests_refused": requests_refused(&p.keys, l),
            })
        })
        .collect();
    let keys = pooled(&periods);
    let levels = distribution(&keys);
    Some(json!({
        "rule": &*rule.label, "limit": l, "current_limit": own,
        "window_seconds": window, "period_seconds": period_of(window),
        "windows": windows, "usage": summary(&keys), "at_least": levels,
        "keys_refused": keys_refused(&keys, l), "requests_refused": requests_refused(&keys, l),
    }))
}

/// `sluice advise`'s table, from `/api/usage` (one domain, or all).
pub fn advice_table(doc: &Value) -> String {
    use crate::table::{at, cell, columns};
    let head = [
        "DOMAIN",
        "RULE",
        "LIMIT",
        "WINDOW",
        "KEYS",
        "P50",
        "P90",
        "P99",
        "P99.9",
        "MAX",
        "REFUSED KEYS",
        "LIMIT REFUSING 0.1%",
        "1%",
        "5%",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    let domains = match doc.get("domains").and_then(Value::as_array) {
        Some(all) => all.clone(),
        None => vec![doc.clone()],
    };
    for d in &domains {
        for r in at(d, "/rules").as_array().into_iter().flatten() {
            let u = |k: &str| cell(at(r, &format!("/usage/{k}")));
            rows.push(vec![
                cell(at(d, "/domain")),
                cell(at(r, "/rule")),
                cell(at(r, "/limit")),
                format!("{}s", cell(at(r, "/window_seconds"))),
                u("keys"),
                u("p50"),
                u("p90"),
                u("p99"),
                u("p999"),
                u("max"),
                cell(at(r, "/refused_by_limit/keys")),
                u("limit_refusing/0.1%"),
                u("limit_refusing/1%"),
                u("limit_refusing/5%"),
            ]);
        }
    }
    columns(&rows)
}
