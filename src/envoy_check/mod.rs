//! `sluice check RULES --envoy FILE`: is my limit applied? The Envoy side
//! (a bootstrap, or an admin `/config_dump`) read against the rules: every
//! HTTP connection manager's ratelimit filter, every `rate_limits` entry of
//! its routes, the descriptor each can send and the rule it meets, and the
//! holes between the two halves, by severity ([`holes`]).

mod actions;
mod holes;
mod quota;
mod read;
mod report;
mod routes;
mod versions;

use std::path::{Path, PathBuf};

use crate::config::{Reach, Rules, Shape};

pub(crate) use read::ReadError;
pub(crate) use report::{json, text};
pub(crate) use versions::EnvoyVersion;

use actions::{Absent, Descriptor, Source};
use read::Hcm;
use routes::Sent;

/// How bad a finding is: errors fail the check (exit 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Severity {
    Error,
    Warning,
}

/// One hole, named by file, listener, route and action.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) severity: Severity,
    pub(crate) file: String,
    pub(crate) listener: String,
    pub(crate) route: Option<String>,
    pub(crate) action: Option<String>,
    pub(crate) message: String,
}

/// What one `rate_limits` entry sends and meets.
#[derive(Debug)]
pub(crate) struct Meeting {
    pub(crate) sent: Sent,
    /// The rule's path, name, limit and shape, or why none.
    pub(crate) meets: Result<String, String>,
    /// Rules only some values meet.
    pub(crate) specific: Vec<String>,
    /// What absent inputs do.
    pub(crate) absent: Vec<String>,
    /// The rule met, when it is a token bucket without `overdraft: true`
    /// charged at stream done (it would refuse the charge that does not
    /// fit and take nothing, so the checks after it keep passing).
    pub(crate) charged_bucket: Option<String>,
}

/// One ratelimit filter and its routes.
#[derive(Debug)]
pub(crate) struct FilterReport {
    pub(crate) file: String,
    pub(crate) listener: String,
    pub(crate) domain: String,
    pub(crate) failure_mode_deny: bool,
    pub(crate) timeout: Option<String>,
    pub(crate) cluster: Option<String>,
    pub(crate) meetings: Vec<Meeting>,
}

/// The whole check.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) filters: Vec<FilterReport>,
    pub(crate) findings: Vec<Finding>,
}

impl Report {
    /// Exit status: 1 with errors, 0 with warnings only.
    pub(crate) fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

/// Checks every file against `rules`, as the Envoy `envoy` (when known)
/// reads it; a `/config_dump` says its own version.
pub(crate) fn check(
    rules: &Rules,
    files: &[PathBuf],
    envoy: Option<EnvoyVersion>,
) -> Result<Report, ReadError> {
    let mut report = Report::default();
    let mut reached: Vec<(String, String)> = Vec::new();
    let mut domains: Vec<String> = Vec::new();
    // Files that are lists of resources (a control plane's listeners in
    // one, its route configurations in another) are read as one.
    let mut resources: Vec<serde_json::Value> = Vec::new();
    let mut listed: Vec<String> = Vec::new();
    for file in files {
        let doc = read::document(file)?;
        let envoy = versions::of(&doc).or(envoy);
        if let serde_json::Value::Array(items) = doc {
            resources.extend(items);
            listed.push(file.display().to_string());
            continue;
        }
        for hcm in read::managers(&doc) {
            let before = report.filters.len();
            check_hcm(rules, file, &hcm, &mut report, &mut reached, &mut domains);
            needs(&mut report, before, envoy);
        }
    }
    if !listed.is_empty() {
        let joined = PathBuf::from(listed.join(" + "));
        for hcm in read::managers(&serde_json::Value::Array(resources)) {
            let before = report.filters.len();
            check_hcm(
                rules,
                &joined,
                &hcm,
                &mut report,
                &mut reached,
                &mut domains,
            );
            needs(&mut report, before, envoy);
        }
    }
    holes::unreachable(rules, &domains, &reached, &mut report);
    report.findings.sort_by_key(|f| f.severity);
    Ok(report)
}

/// Errors for what the filters from `first` on ask of an Envoy older than
/// what they need.
fn needs(report: &mut Report, first: usize, envoy: Option<EnvoyVersion>) {
    let Some(envoy) = envoy else { return };
    let mut found = Vec::new();
    for f in report.filters.iter().skip(first) {
        let at = holes::At::new(&f.file, &f.listener);
        for m in &f.meetings {
            let s = &m.sent;
            for why in versions::unsupported(s, envoy) {
                let route = Some(format!("{} (virtual host {})", s.route, s.vhost));
                let action = Some(format!("{} rate_limits[{}]", s.place, s.index));
                at.error(&mut found, route, action, why);
            }
        }
    }
    report.findings.extend(found);
}

fn check_hcm(
    rules: &Rules,
    file: &Path,
    hcm: &Hcm,
    report: &mut Report,
    reached: &mut Vec<(String, String)>,
    domains: &mut Vec<String>,
) {
    let file_name = file.display().to_string();
    let at = holes::At::new(&file_name, &hcm.listener);
    holes::quota(hcm, &at, &mut report.findings);
    check_quota(rules, hcm, &at, report, reached, domains);
    if let Some(missing) = &hcm.missing_rds {
        at.warn(
            &mut report.findings,
            None,
            None,
            format!(
                "routes {missing} (RDS) are not in this file: their rate_limits are not checked"
            ),
        );
    }
    // Every ratelimit filter, whatever its name's suffix: Envoy Gateway
    // adds one per shared policy (`envoy.filters.http.ratelimit/<domain>`).
    for (index, filter) in hcm.filters.iter().enumerate() {
        if filter.is("ratelimit.v3.RateLimit", "envoy.filters.http.ratelimit") {
            check_filter(
                rules,
                &file_name,
                hcm,
                (index, filter),
                &at,
                report,
                reached,
                domains,
            );
        }
    }
}

/// One ratelimit filter: its settings, and every entry it applies against
/// the rules of its domain (or of the route's `RateLimitPerRoute` domain).
#[allow(
    clippy::too_many_arguments,
    reason = "the check's state, threaded through"
)]
fn check_filter(
    rules: &Rules,
    file_name: &str,
    hcm: &Hcm,
    (index, filter): (usize, &read::Filter),
    at: &holes::At<'_>,
    report: &mut Report,
    reached: &mut Vec<(String, String)>,
    domains: &mut Vec<String>,
) {
    let mut fr = FilterReport::new(file_name, &hcm.listener, &filter.config);
    let domain = fr.domain.clone();
    let (sent, policies) = hcm
        .routes
        .as_ref()
        .map(|r| routes::sent(r, &filter.name))
        .unwrap_or_default();
    // The filter's own domain matters only if some entry is sent to it.
    let used = sent
        .iter()
        .any(|s| s.domain.as_ref().is_none_or(|d| *d == domain));
    holes::filter(rules, &fr, filter.disabled, used, at, &mut report.findings);
    holes::cors(hcm, index, &policies, at, &mut report.findings);
    domains.push(domain.clone());
    for s in sent {
        let domain = s.domain.clone().unwrap_or_else(|| domain.clone());
        if !domains.contains(&domain) {
            domains.push(domain.clone());
        }
        let dom = rules.domain(&domain);
        let own = domain == fr.domain;
        let m = meet(dom, s, &domain, reached);
        holes::sent(&m, (dom.is_some(), own), at, &mut report.findings);
        fr.meetings.push(m);
    }
    report.filters.push(fr);
}

/// The quota filters' domains and buckets against the rules.
fn check_quota(
    rules: &Rules,
    hcm: &Hcm,
    at: &holes::At<'_>,
    report: &mut Report,
    reached: &mut Vec<(String, String)>,
    domains: &mut Vec<String>,
) {
    for (domain, buckets) in quota::buckets(hcm) {
        let Some(dom) = rules.domain(&domain) else {
            let why = format!(
                "the quota filter's domain {domain:?} has no rules: every bucket is allowed"
            );
            at.error_here(&mut report.findings, why);
            continue;
        };
        domains.push(domain.clone());
        for b in &buckets {
            let paths = quota::reach(dom, b);
            if paths.is_empty() {
                let keys: Vec<&str> = b.entries.iter().map(|(k, _, _)| k.as_str()).collect();
                let why = format!(
                    "the quota bucket {{{}}} meets no rule: it is allowed everything",
                    keys.join(", ")
                );
                at.error_here(&mut report.findings, why);
            }
            reached.extend(paths.into_iter().map(|p| (domain.clone(), p)));
        }
    }
}

impl FilterReport {
    /// A ratelimit filter's settings, from its `config`.
    fn new(file: &str, listener: &str, c: &serde_json::Value) -> FilterReport {
        let text = |p: &str| c.pointer(p).and_then(|v| v.as_str()).map(str::to_owned);
        FilterReport {
            file: file.to_owned(),
            listener: listener.to_owned(),
            domain: text("/domain").unwrap_or_default(),
            failure_mode_deny: c
                .get("failure_mode_deny")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            timeout: text("/timeout"),
            cluster: text("/rate_limit_service/grpc_service/envoy_grpc/cluster_name"),
            meetings: Vec::new(),
        }
    }
}

/// The entries a descriptor sends when every input is present, as the
/// rules see them.
fn shape(d: &Descriptor) -> Vec<(&str, Shape<'_>)> {
    d.entries
        .iter()
        .map(|e| {
            let v = match &e.value {
                Source::Fixed(v) => Shape::Fixed(v),
                Source::Runtime(_) => Shape::Runtime,
            };
            (e.key.as_str(), v)
        })
        .collect()
}

/// The rule `general` when `d` charges it at stream done and it is a token
/// bucket without `overdraft: true` (which takes nothing it refuses).
fn charged_bucket(d: &Descriptor, general: Option<&crate::config::Rule>) -> Option<String> {
    let charged = d.stream_done && !d.negative && d.hits != actions::Hits::Number(0);
    general.filter(|_| charged).and_then(|r| match r.limit {
        crate::config::LimitDef::Limited {
            algorithm: crate::limiter::Algorithm::TokenBucket { refill, .. },
            ..
        } if !refill.overdraft => Some(r.label.to_string()),
        _ => None,
    })
}

fn meet(
    dom: Option<&crate::config::Domain>,
    sent: Sent,
    domain: &str,
    reached: &mut Vec<(String, String)>,
) -> Meeting {
    let absent = sent
        .descriptor
        .entries
        .iter()
        .filter_map(|e| match &e.absent {
            Absent::Never => None,
            Absent::Skipped(w) => Some(format!("when {w}: the {} entry is left out", e.key)),
            Absent::Dropped(w) => Some(format!(
                "when {w}: no descriptor is sent, and this entry limits nothing"
            )),
        })
        .collect();
    let Some(dom) = dom else {
        return Meeting {
            sent,
            meets: Err(format!("domain {domain} has no rules")),
            specific: Vec::new(),
            absent,
            charged_bucket: None,
        };
    };
    let Reach {
        general,
        specific,
        why_none,
    } = dom.reach(&shape(&sent.descriptor));
    for r in general.iter().chain(specific.iter().map(|(_, r)| r)) {
        reached.push((domain.to_owned(), r.path.to_string()));
    }
    let describe = |r: &crate::config::Rule| {
        let name = r
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        format!(
            "{}{name}: {}",
            r.label,
            crate::config::describe_limit(&r.limit)
        )
    };
    Meeting {
        charged_bucket: charged_bucket(&sent.descriptor, general.map(|r| &**r)),
        meets: general
            .map(|r| describe(r))
            .ok_or_else(|| why_none.unwrap_or_else(|| "no rule".into())),
        specific: specific
            .iter()
            .map(|(via, r)| format!("{via} → {}", describe(r)))
            .collect(),
        sent,
        absent,
    }
}
