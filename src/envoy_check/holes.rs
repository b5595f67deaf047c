//! The holes between Envoy's half and the rules, each named by its file,
//! listener, route and action:
//!
//! - errors: a filter domain with no rules; a descriptor that can never meet
//!   a rule; a `hits_addend` read from a header or query parameter the
//!   client writes, on a route whose match does not admit only a number
//!   (Envoy drops the descriptor when it is not one, and the request passes
//!   unchecked);
//! - warnings: a rule no route reaches; a filter without a timeout, or
//!   failing closed with no rule saying how a store failure is decided; a
//!   local 429 a browser on another origin cannot read (CORS after the
//!   ratelimit filter, or `Retry-After` not exposed); a quota bucket keyed
//!   on a header no filter before it verified; a token bucket without
//!   `overdraft: true` charged at stream done; anything not understood.

use super::actions::{Hits, Input};
use super::read::Hcm;
use super::routes::{Cors, admits_only_number_params, admits_only_numbers};
use super::{FilterReport, Finding, Meeting, Report, Severity};
use crate::config::Rules;

/// Where findings are.
pub(super) struct At<'a> {
    file: &'a str,
    listener: &'a str,
}

impl<'a> At<'a> {
    pub(super) fn new(file: &'a str, listener: &'a str) -> At<'a> {
        At { file, listener }
    }

    fn add(
        &self,
        out: &mut Vec<Finding>,
        severity: Severity,
        route: Option<String>,
        action: Option<String>,
        message: String,
    ) {
        out.push(Finding {
            severity,
            file: self.file.to_owned(),
            listener: self.listener.to_owned(),
            route,
            action,
            message,
        });
    }

    pub(super) fn warn(
        &self,
        out: &mut Vec<Finding>,
        route: Option<String>,
        action: Option<String>,
        message: String,
    ) {
        self.add(out, Severity::Warning, route, action, message);
    }

    pub(super) fn error_here(&self, out: &mut Vec<Finding>, message: String) {
        self.add(out, Severity::Error, None, None, message);
    }

    pub(super) fn error(
        &self,
        out: &mut Vec<Finding>,
        route: Option<String>,
        action: Option<String>,
        message: String,
    ) {
        self.add(out, Severity::Error, route, action, message);
    }
}

/// The filter's own settings.
pub(super) fn filter(
    rules: &Rules,
    f: &FilterReport,
    disabled: bool,
    used: bool,
    at: &At<'_>,
    out: &mut Vec<Finding>,
) {
    let Some(domain) = rules.domain(&f.domain) else {
        // A filter no entry is sent to under its own domain (every route
        // names another in its RateLimitPerRoute, or none has rate_limits)
        // limits nothing, and its domain needs no rules.
        if !used {
            return;
        }
        at.error(
            out,
            None,
            None,
            format!(
                "the ratelimit filter's domain {:?} has no rules: every request passes",
                f.domain
            ),
        );
        return;
    };
    if disabled {
        at.warn(
            out,
            None,
            None,
            "the ratelimit filter is disabled: only routes that enable it are limited".into(),
        );
    }
    if f.timeout.is_none() {
        at.warn(out, None, None, "the ratelimit filter has no timeout: Envoy's default is 20 ms, as short as sluice's own store deadline; set one (the shipped configs use 0.2s)".into());
    }
    let story = domain.rules().iter().any(|r| r.on_failure.is_some());
    if f.failure_mode_deny && !story {
        at.warn(out, None, None, "failure_mode_deny: true refuses every request when sluice cannot answer, and no rule of the domain sets on_store_failure: decide which routes must fail closed and say so per rule".into());
    }
}

/// One entry's holes.
/// `(domain_known, own)`: whether the entry's domain has rules, and whether
/// it is the filter's own (whose lack of rules the filter's finding says).
pub(super) fn sent(
    m: &Meeting,
    (domain_known, own): (bool, bool),
    at: &At<'_>,
    out: &mut Vec<Finding>,
) {
    let s = &m.sent;
    let route = Some(format!("{} (virtual host {})", s.route, s.vhost));
    let action = Some(format!("{} rate_limits[{}]", s.place, s.index));
    elsewhere(m, (domain_known, own), at, (&route, &action), out);
    for what in &s.descriptor.not_understood {
        at.warn(
            out,
            route.clone(),
            action.clone(),
            format!("not understood: {what}; this entry is checked without it"),
        );
    }
    if let (true, Err(why)) = (domain_known, &m.meets) {
        if m.specific.is_empty() {
            at.error(
                out,
                route.clone(),
                action.clone(),
                format!("this descriptor can never meet a rule ({why}): it limits nothing"),
            );
        } else {
            at.warn(
                out,
                route.clone(),
                action.clone(),
                format!(
                    "only some values meet a rule ({}); any other value is unlimited ({why})",
                    m.specific.join("; ")
                ),
            );
        }
    }
    if let Hits::Format {
        text,
        client: Some(input),
    } = &s.descriptor.hits
    {
        let admitted = match input {
            Input::Header(h) => admits_only_numbers(&s.matcher, h),
            Input::Query(q) => admits_only_number_params(&s.matcher, q),
        };
        if !admitted {
            let (kind, name) = match input {
                Input::Header(h) => ("header", h),
                Input::Query(q) => ("query parameter", q),
            };
            at.error(out, route, action, format!("hits_addend {text} reads the {kind} {name}, which the client writes, and the route's match does not admit only a number: Envoy drops the descriptor when the value is not a number from 0 to 10^9, so `{name}: abc` skips this limit; match it with a safe_regex such as [0-9]{{1,9}} and answer the rest 400"));
        }
    }
}

/// An entry's holes that are not its descriptor's: a `RateLimitPerRoute`
/// domain with no rules, and a charge at stream done on a token bucket
/// that would refuse it and take nothing.
fn elsewhere(
    m: &Meeting,
    (domain_known, own): (bool, bool),
    at: &At<'_>,
    (route, action): (&Option<String>, &Option<String>),
    out: &mut Vec<Finding>,
) {
    if let (false, false, Some(d)) = (domain_known, own, &m.sent.domain) {
        at.error(
            out,
            route.clone(),
            action.clone(),
            format!("its RateLimitPerRoute domain {d:?} has no rules: this entry limits nothing"),
        );
    }
    if let Some(rule) = &m.charged_bucket {
        at.warn(out, route.clone(), action.clone(), format!("charged at stream done on {rule}, a token bucket without overdraft: true: a charge that does not fit is refused and takes nothing, so the checks after it keep passing and what was used goes unpaid; give the rule overdraft: true"));
    }
}

/// A CORS policy is in force but a refused browser request cannot read
/// its 429: the CORS filter runs after the ratelimit filter (whose local
/// reply then carries no CORS headers), or `Retry-After` is not exposed.
pub(super) fn cors(
    hcm: &Hcm,
    ratelimit: usize,
    policies: &[Cors],
    at: &At<'_>,
    out: &mut Vec<Finding>,
) {
    if policies.is_empty() {
        return;
    }
    let cors_at = hcm
        .filters
        .iter()
        .position(|f| f.is("cors.v3.Cors", "envoy.filters.http.cors"));
    if cors_at.is_none_or(|c| c > ratelimit) {
        at.warn(out, None, None, "a CORS policy is set, but the CORS filter does not run before the ratelimit filter: its 429 carries no Access-Control-Allow-Origin, and a browser on another origin sees a network error, never the status".into());
    }
    for p in policies
        .iter()
        .filter(|p| !p.exposes.iter().any(|h| h == "retry-after"))
    {
        at.warn(out, Some(p.at.clone()), None, "the CORS policy does not expose Retry-After: a script on another origin cannot read how long to wait after a 429 (add retry-after to expose_headers)".into());
    }
}

/// A quota filter whose buckets are keyed on a request header that no
/// authentication filter before it verified: a client names its own bucket.
pub(super) fn quota(hcm: &Hcm, at: &At<'_>, out: &mut Vec<Finding>) {
    const AUTH: [&str; 6] = [
        "api_key_auth",
        "jwt_authn",
        "ext_authz",
        "basic_auth",
        "oauth2",
        "rbac",
    ];
    for (i, f) in hcm.filters.iter().enumerate() {
        if !f.is(
            "rate_limit_quota.v3.RateLimitQuotaFilterConfig",
            "envoy.filters.http.rate_limit_quota",
        ) {
            continue;
        }
        let mut headers = super::quota::keyed_on(&f.config);
        headers.sort();
        headers.dedup();
        let verified = hcm.filters.iter().take(i).any(|g| {
            !g.disabled
                && AUTH
                    .iter()
                    .any(|a| g.kind.contains(a) || g.name.contains(a))
        });
        if !headers.is_empty() && !verified {
            at.warn(out, None, None, format!("the quota filter keys buckets on request header {} and no authentication filter runs before it: a client that writes a fresh value gets a fresh bucket", headers.join(", ")));
        }
    }
}

/// Rules of a checked domain that no route's descriptor meets.
pub(super) fn unreachable(
    rules: &Rules,
    domains: &[String],
    reached: &[(String, String)],
    report: &mut Report,
) {
    let mut seen: Vec<&String> = Vec::new();
    for d in domains {
        if seen.contains(&d) {
            continue;
        }
        seen.push(d);
        let Some(domain) = rules.domain(d) else {
            continue;
        };
        for r in domain.rules() {
            let hit = reached
                .iter()
                .any(|(rd, path)| rd == d && **path == *r.path);
            // An unlimited rule limits nothing, reached or not.
            let limited = !matches!(r.limit, crate::config::LimitDef::Unlimited);
            if !hit && limited {
                report.findings.push(Finding {
                    severity: Severity::Warning,
                    file: "(rules)".into(),
                    listener: format!("domain {d}"),
                    route: None,
                    action: None,
                    message: format!(
                        "rule {} is met by no route's descriptor in the checked files",
                        r.label
                    ),
                });
            }
        }
    }
}
