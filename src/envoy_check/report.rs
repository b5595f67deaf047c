//! The check's report: for people (each filter, each route's entries, what
//! they send and meet, then the findings by severity) and for CI (`--json`).

use serde_json::{Value, json};

use super::actions::{Hits, Source};
use super::{Finding, Meeting, Report, Severity};

fn sends(m: &Meeting) -> String {
    m.sent
        .descriptor
        .entries
        .iter()
        .map(|e| match &e.value {
            Source::Fixed(v) => format!("{}={v}", e.key),
            Source::Runtime(from) => format!("{}=<{from}>", e.key),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn hits(m: &Meeting) -> Option<String> {
    let d = &m.sent.descriptor;
    let h = match &d.hits {
        Hits::One => return d.stream_done.then(|| "at stream done".into()),
        Hits::Number(n) => format!("hits {n}"),
        Hits::Format { text, .. } => format!("hits {text}"),
    };
    let sign = if d.negative { " given back" } else { "" };
    let when = if d.stream_done { " at stream done" } else { "" };
    Some(format!("{h}{sign}{when}"))
}

fn place(f: &Finding) -> String {
    let mut at = format!("{}: {}", f.file, f.listener);
    if let Some(r) = &f.route {
        at.push_str(&format!(", route {r}"));
    }
    if let Some(a) = &f.action {
        at.push_str(&format!(", {a}"));
    }
    at
}

/// The report for people.
pub(crate) fn text(r: &Report) -> String {
    let mut out = String::new();
    for f in &r.filters {
        out.push_str(&format!(
            "{}: listener {}: ratelimit filter, domain {:?}, timeout {}, failure_mode_deny {}, cluster {}\n",
            f.file,
            f.listener,
            f.domain,
            f.timeout.as_deref().unwrap_or("(Envoy's 20ms)"),
            f.failure_mode_deny,
            f.cluster.as_deref().unwrap_or("?")
        ));
        for m in &f.meetings {
            let s = &m.sent;
            // Under merged hostnames one filter serves several domains: a
            // route whose RateLimitPerRoute names another says so.
            let domain = match s.domain.as_deref() {
                Some(d) if d != f.domain => format!(", domain {d:?}"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {} (virtual host {}), {} rate_limits[{}]{domain}\n",
                s.route, s.vhost, s.place, s.index
            ));
            let extra = hits(m).map(|h| format!(" [{h}]")).unwrap_or_default();
            out.push_str(&format!("    sends  {}{extra}\n", sends(m)));
            match &m.meets {
                Ok(rule) => out.push_str(&format!("    meets  {rule}\n")),
                Err(why) => out.push_str(&format!("    meets  no rule: unlimited ({why})\n")),
            }
            for sp in &m.specific {
                out.push_str(&format!("    or     {sp}\n"));
            }
            for a in &m.absent {
                out.push_str(&format!("    absent {a}\n"));
            }
            if s.descriptor.overridden {
                out.push_str("    note   its `limit` (from metadata) replaces the rule's limit when present\n");
            }
        }
    }
    let errors = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = r.findings.len() - errors;
    for f in &r.findings {
        let kind = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        out.push_str(&format!("{kind}: {}: {}\n", place(f), f.message));
    }
    out.push_str(&format!("{errors} errors, {warnings} warnings\n"));
    out
}

/// The report for CI.
pub(crate) fn json(r: &Report) -> Value {
    let filters: Vec<Value> = r
        .filters
        .iter()
        .map(|f| {
            let routes: Vec<Value> = f
                .meetings
                .iter()
                .map(|m| {
                    let entries: Vec<Value> = m
                        .sent
                        .descriptor
                        .entries
                        .iter()
                        .map(|e| match &e.value {
                            Source::Fixed(v) => json!({"key": e.key, "value": v}),
                            Source::Runtime(from) => json!({"key": e.key, "from": from}),
                        })
                        .collect();
                    json!({
                        "route": m.sent.route, "virtual_host": m.sent.vhost,
                        "domain": m.sent.domain.as_deref().unwrap_or(&f.domain),
                        "place": m.sent.place, "index": m.sent.index,
                        "entries": entries, "hits": hits(m),
                        "rule": m.meets.as_ref().ok(), "unlimited_because": m.meets.as_ref().err(),
                        "only_for": m.specific, "when_absent": m.absent,
                        "limit_override": m.sent.descriptor.overridden,
                    })
                })
                .collect();
            json!({
                "file": f.file, "listener": f.listener, "domain": f.domain,
                "timeout": f.timeout, "failure_mode_deny": f.failure_mode_deny,
                "cluster": f.cluster, "routes": routes,
            })
        })
        .collect();
    let findings: Vec<Value> = r
        .findings
        .iter()
        .map(|f| {
            json!({
                "severity": if f.severity == Severity::Error { "error" } else { "warning" },
                "file": f.file, "listener": f.listener, "route": f.route,
                "action": f.action, "message": f.message,
            })
        })
        .collect();
    json!({"filters": filters, "findings": findings})
}
