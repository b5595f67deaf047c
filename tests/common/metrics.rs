//! Reading what sluice exports: one series, a family's sum, the families exported and the bounds.

use super::*;

/// A metric's value from the Prometheus text.
/// Hits of one bound against hostile volume (`sluice_bound_hits_total`).
pub fn bound(s: &Sluice, name: &str) -> f64 {
    metric(
        &s.get("/metrics").1,
        &format!("sluice_bound_hits_total{{bound=\"{name}\"}}"),
    )
    .unwrap_or(0.0)
}

pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// The sum of every series of `family` (whatever its labels).
pub fn metric_sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// An instance's breaker trips and failure-policy decisions so far: both 0
/// while its store answers, however slowly.
pub fn trips_and_policy(s: &Sluice) -> (f64, f64) {
    let m = s.get("/metrics").1;
    (
        metric(&m, "sluice_store_circuit_trips_total").unwrap_or(0.0),
        metric_sum(&m, "sluice_store_policy_decisions_total"),
    )
}

/// `sluice_*` metric families named in a text: a counter's `_total` and a
/// histogram's `_bucket`, `_sum` and `_count` folded into their family.
pub fn metric_families(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("sluice_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.insert(base.to_owned());
        rest = &tail[end..];
    }
    out
}

/// The metric families a sluice exports, read from its `# TYPE` lines; its
/// Redis cannot be reached, so the store's families are there too.
pub fn exported_families() -> std::collections::BTreeSet<String> {
    let s = Sluice::start(
        &[("web.yaml", "domain: web\ndescriptors:\n  - key: k\n")],
        &[
            "--redis-url",
            "redis://127.0.0.1:1",
            "--redis-timeout",
            "50ms",
        ],
    );
    s.get("/metrics")
        .1
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .flat_map(metric_families)
        .collect()
}
