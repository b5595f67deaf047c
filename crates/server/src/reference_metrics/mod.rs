//! The reference's stats as Prometheus, on their own address
//! (`--reference-metrics-addr`, ratelimit mode's `USE_PROMETHEUS` with
//! `PROMETHEUS_ADDR`): the stat names statsd gets
//! (`ratelimit.service.rate_limit.<domain>.<key>.total_hits`, ...) with
//! their running totals, named and labelled by a statsd_exporter mapping
//! file (`--reference-metrics-mapper`, `PROMETHEUS_MAPPER_YAML`) as the
//! reference names them, so dashboards built on it (Envoy Gateway's) keep
//! working. sluice's own `sluice_*` stay on the admin port.
//!
//! Read from the same counters as `/metrics` at scrape time: the request
//! path pays nothing for it.

mod mapper;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use mapper::Mapper;

use crate::metrics::{Metrics, RULE_COUNTERS};
use crate::statsd::sanitize;

/// Every counter the reference keeps, by its statsd name, with its total.
fn stats(metrics: &Metrics) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (key, rule) in metrics.rule_snapshot() {
        for (name, _, get) in RULE_COUNTERS.iter() {
            let stat = format!("ratelimit.service.rate_limit.{}.{}.{name}", key.0, key.1);
            out.push((sanitize(&stat), get(&rule).load(Relaxed)));
        }
    }
    let t = metrics.service_totals();
    for (stat, n) in [
        ("ratelimit.service.global_shadow_mode", t.global_shadow_mode),
        ("ratelimit.service.config_load_success", t.config_loads),
        ("ratelimit.service.config_load_error", t.config_load_errors),
        ("ratelimit.service.domain_not_found", t.domain_not_found),
        (
            "ratelimit_server.ShouldRateLimit.total_requests",
            t.requests,
        ),
    ] {
        out.push((stat.to_owned(), n));
    }
    out
}

/// The exposition: every stat mapped, stats that map to one series summed.
pub fn render(metrics: &Metrics, mapper: &Mapper) -> String {
    let mut families: BTreeMap<String, BTreeMap<Vec<(String, String)>, u64>> = BTreeMap::new();
    for (stat, n) in stats(metrics) {
        if let Some((name, labels)) = mapper.map(&stat) {
            let series = families.entry(name).or_default().entry(labels).or_default();
            *series = series.saturating_add(n);
        }
    }
    let mut out = process();
    for (name, series) in families {
        let _ = writeln!(out, "# TYPE {name} counter");
        for (labels, n) in series {
            let shown: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_value(v)))
                .collect();
            if shown.is_empty() {
                let _ = writeln!(out, "{name} {n}");
            } else {
                let _ = writeln!(out, "{name}{{{}}} {n}", shown.join(","));
            }
        }
    }
    out
}

/// The process's memory, as the reference's Prometheus client reports it
/// (what Envoy Gateway's dashboard charts); read at scrape time.
fn process() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let mut out = String::new();
    for (name, field) in [
        ("process_resident_memory_bytes", "VmRSS:"),
        ("process_virtual_memory_bytes", "VmSize:"),
    ] {
        if let Some(n) = kb(field) {
            let _ = writeln!(
                out,
                "# TYPE {name} gauge\n{name} {}",
                n.saturating_mul(1024)
            );
        }
    }
    out
}

fn escape_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Served {
    metrics: Arc<Metrics>,
    mapper: Arc<Mapper>,
}

async fn scrape(
    State(s): State<Arc<Served>>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        render(&s.metrics, &s.mapper),
    )
}

/// Serves `GET /metrics` on `listener` until `token` is cancelled, under
/// the admin port's connection bounds (`limits`).
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    mapper: Arc<Mapper>,
    limits: crate::admin::AdminBounds,
    token: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(Arc::new(Served {
            metrics: metrics.clone(),
            mapper,
        }));
    if let Err(e) = crate::admin::serve_bounded(listener, app, limits, metrics, token).await {
        tracing::warn!(error = %e, "--reference-metrics-addr stopped serving");
    }
}
