//! Every `rate_limits` entry of a route configuration, where it sits
//! (virtual host, route, or the ratelimit filter's `RateLimitPerRoute`),
//! with the route's match (what admits a request to it), and the CORS
//! policies that shape a refused browser request's answer.

use serde_json::Value;

use super::actions::{Descriptor, descriptor};

/// A `rate_limits` entry and where it is.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) vhost: String,
    /// The route as its author would find it: its name, or its match.
    pub(crate) route: String,
    /// `virtual host`, `route` or `RateLimitPerRoute`.
    pub(crate) place: &'static str,
    pub(crate) index: usize,
    pub(crate) descriptor: Descriptor,
    /// The route's `match` (empty for a virtual host's own entries).
    pub(crate) matcher: Value,
    /// `RateLimitPerRoute`'s `domain`, which replaces the filter's.
    pub(crate) domain: Option<String>,
}

/// A CORS policy: where, and the headers it exposes (lowercase).
#[derive(Debug)]
pub(crate) struct Cors {
    pub(crate) at: String,
    pub(crate) exposes: Vec<String>,
}

const CORS: &str = "envoy.filters.http.cors";

fn name(v: &Value) -> String {
    v.get("name")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)")
        .to_owned()
}

/// A route named by its `name`, else by its match.
fn route_label(r: &Value) -> String {
    if let Some(n) = r.get("name").and_then(Value::as_str) {
        return n.to_owned();
    }
    let m = r.get("match").cloned().unwrap_or(Value::Null);
    for k in ["prefix", "path", "path_separated_prefix"] {
        if let Some(p) = m.get(k).and_then(Value::as_str) {
            return format!("{k} {p}");
        }
    }
    match m.pointer("/safe_regex/regex").and_then(Value::as_str) {
        Some(re) => format!("regex {re}"),
        None => m.to_string(),
    }
}

fn entries(list: Option<&Value>) -> &[Value] {
    list.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn cors(at: String, policy: &Value) -> Cors {
    let exposes = policy
        .get("expose_headers")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    Cors { at, exposes }
}

/// Every entry of `config` (a `RouteConfiguration`) that the ratelimit
/// filter named `filter` applies (the route's and virtual host's own, or
/// its `RateLimitPerRoute` under that name instead), and its CORS policies.
pub(crate) fn sent(config: &Value, filter: &str) -> (Vec<Sent>, Vec<Cors>) {
    let mut out = Vec::new();
    let mut policies = Vec::new();
    for vh in entries(config.get("virtual_hosts")) {
        let vhost = name(vh);
        for p in [
            vh.get("cors"),
            vh.pointer(&format!(
                "/typed_per_filter_config/{}",
                CORS.replace('/', "~1")
            )),
        ]
        .into_iter()
        .flatten()
        {
            policies.push(cors(format!("virtual host {vhost}"), p));
        }
        for (i, rl) in entries(vh.get("rate_limits")).iter().enumerate() {
            out.push(Sent {
                vhost: vhost.clone(),
                route: "(every route)".into(),
                place: "virtual host",
                index: i,
                descriptor: descriptor(rl, None),
                matcher: Value::Null,
                domain: None,
            });
        }
        for r in entries(vh.get("routes")) {
            let per_filter = r.get("typed_per_filter_config");
            if let Some(p) = per_filter.and_then(|t| t.get(CORS)) {
                policies.push(cors(format!("route {}", route_label(r)), p));
            }
            route_entries(r, &vhost, per_filter.and_then(|t| t.get(filter)), &mut out);
        }
    }
    (out, policies)
}

/// A route's own entries and those of its `RateLimitPerRoute` for the
/// filter (`per_route`), whose domain replaces the filter's for them all.
fn route_entries(r: &Value, vhost: &str, per_route: Option<&Value>, out: &mut Vec<Sent>) {
    let route = route_label(r);
    let cluster = r.pointer("/route/cluster").and_then(Value::as_str);
    let matcher = r.get("match").cloned().unwrap_or(Value::Null);
    let domain = per_route
        .and_then(|c| c.get("domain"))
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .map(str::to_owned);
    let lists = [
        ("route", r.pointer("/route/rate_limits")),
        (
            "RateLimitPerRoute",
            per_route.and_then(|c| c.get("rate_limits")),
        ),
    ];
    for (place, list) in lists {
        for (i, rl) in entries(list).iter().enumerate() {
            out.push(Sent {
                vhost: vhost.to_owned(),
                route: route.clone(),
                place,
                index: i,
                descriptor: descriptor(rl, cluster),
                matcher: matcher.clone(),
                domain: domain.clone(),
            });
        }
    }
}

/// Whether a route's match admits only requests whose `header` is a whole
/// number of at most nine digits (so Envoy can always read it as a
/// `hits_addend`): a header matcher with a `safe_regex` of digits only.
pub(crate) fn admits_only_numbers(matcher: &Value, header: &str) -> bool {
    let digits_only = |re: &str| {
        let re = re.trim_start_matches('^').trim_end_matches('$');
        let body = re
            .strip_prefix("[0-9]")
            .or_else(|| re.strip_prefix("\\d"))
            .unwrap_or("-");
        match body.strip_prefix('{').and_then(|b| b.strip_suffix('}')) {
            Some(bounds) => {
                let max = bounds.rsplit(',').next().unwrap_or_default();
                max.parse::<u32>().is_ok_and(|m| (1..=9).contains(&m))
            }
            None => false,
        }
    };
    entries(matcher.get("headers")).iter().any(|h| {
        h.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.eq_ignore_ascii_case(header))
            && [
                h.pointer("/string_match/safe_regex/regex"),
                h.pointer("/safe_regex_match/regex"),
            ]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(digits_only)
    })
}

/// The same for a query parameter (`query_parameters` matchers).
pub(crate) fn admits_only_number_params(matcher: &Value, param: &str) -> bool {
    let headers: Vec<Value> = entries(matcher.get("query_parameters"))
        .iter()
        .map(|q| serde_json::json!({"name": q.get("name"), "string_match": q.get("string_match")}))
        .collect();
    admits_only_numbers(&serde_json::json!({"headers": headers}), param)
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
