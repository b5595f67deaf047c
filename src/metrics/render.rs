//! The Prometheus text exposition, rendered by hand.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::stats::BUCKETS;
use super::{Histogram, Metrics, RuleStats};

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Copy the pointers and let go: requests that look up a rule's
        // counters never wait for a scrape to format its text.
        let rules = self.rule_snapshot();
        for (name, help, get) in RULE_COUNTERS {
            let _ = writeln!(out, "# HELP sluice_rule_{name}_total {help}");
            let _ = writeln!(out, "# TYPE sluice_rule_{name}_total counter");
            for ((domain, path), stats) in rules.iter() {
                let _ = writeln!(
                    out,
                    "sluice_rule_{name}_total{{domain=\"{}\",rule=\"{}\"}} {}",
                    escape(domain),
                    escape(path),
                    get(stats).load(Relaxed)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP sluice_requests_total ShouldRateLimit calls by overall result."
        );
        let _ = writeln!(out, "# TYPE sluice_requests_total counter");
        for (code, c) in [
            ("ok", &self.requests_ok),
            ("over_limit", &self.requests_over),
            ("invalid", &self.requests_invalid),
            ("unavailable", &self.requests_unavailable),
        ] {
            let _ = writeln!(
                out,
                "sluice_requests_total{{code=\"{code}\"}} {}",
                c.load(Relaxed)
            );
        }
        write_histogram(
            &mut out,
            "sluice_request_duration_seconds",
            "Time to answer ShouldRateLimit.",
            &self.latency,
        );
        for (name, kind, help, v) in [
            (
                "sluice_domain_not_found_total",
                "counter",
                "Requests for a domain no rule defines (answered OK).",
                &self.domain_not_found,
            ),
            (
                "sluice_global_shadow_mode_total",
                "counter",
                "Over-limit requests let through by --shadow-mode.",
                &self.global_shadow_mode,
            ),
            (
                "sluice_config_loads_total",
                "counter",
                "Successful config loads.",
                &self.config_loads,
            ),
            (
                "sluice_config_load_errors_total",
                "counter",
                "Config loads rejected (the previous rules stay).",
                &self.config_load_errors,
            ),
            (
                "sluice_config_generation",
                "gauge",
                "Generation of the rules in force.",
                &self.config_generation,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Relaxed)
            );
        }
        self.render_store(&mut out);
        self.render_quota(&mut out, &rules);
        self.render_bounds(&mut out);
        out
    }

    fn render_store(&self, out: &mut String) {
        let st = &self.store;
        write_histogram(
            out,
            "sluice_store_duration_seconds",
            "Time of calls to the shared store.",
            &st.latency,
        );
        let _ = writeln!(
            out,
            "# HELP sluice_store_errors_total Failed calls to the shared store, by kind."
        );
        let _ = writeln!(out, "# TYPE sluice_store_errors_total counter");
        for (kind, c) in [
            ("timeout", &st.timeouts),
            ("error", &st.errors),
            ("rejected", &st.rejected),
        ] {
            let _ = writeln!(
                out,
                "sluice_store_errors_total{{kind=\"{kind}\"}} {}",
                c.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sluice_store_policy_decisions_total Descriptors decided by a failure policy (--store-failure or a rule's on_store_failure) while the store failed.\n\
             # TYPE sluice_store_policy_decisions_total counter"
        );
        for (name, c) in ["fallback", "allow", "deny"]
            .iter()
            .zip(&st.policy_decisions)
        {
            let _ = writeln!(
                out,
                "sluice_store_policy_decisions_total{{policy=\"{name}\"}} {}",
                c.load(Relaxed)
            );
        }
        for (name, kind, help, v) in [
            (
                "sluice_store_circuit_open",
                "gauge",
                "1 while the store is considered down and not asked.",
                &st.circuit_open,
            ),
            (
                "sluice_store_local_cache_hits_total",
                "counter",
                "Descriptors answered over-limit from the local cache.",
                &st.local_cache_hits,
            ),
            (
                "sluice_store_circuit_trips_total",
                "counter",
                "Times the store was declared down.",
                &st.trips,
            ),
            (
                "sluice_memory_counters",
                "gauge",
                "Counters held in memory (the memory store or the fallback), at the last sweep.",
                &st.counters_live,
            ),
            (
                "sluice_memory_counter_evictions_total",
                "counter",
                "Live counters dropped because --max-counters was reached.",
                &st.counter_evictions,
            ),
            (
                "sluice_grpc_connections",
                "gauge",
                "Open gRPC connections.",
                &self.conn.grpc_open,
            ),
            (
                "sluice_admin_connections",
                "gauge",
                "Open admin connections.",
                &self.conn.admin_open,
            ),
            (
                "sluice_connections_idle_closed_total",
                "counter",
                "Connections closed after the idle timeout.",
                &self.conn.idle_closed,
            ),
            (
                "sluice_accept_errors_total",
                "counter",
                "Failed accepts (such as running out of file descriptors), each followed by a pause.",
                &self.conn.accept_errors,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Relaxed)
            );
        }
    }
}

fn write_histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, b) in BUCKETS.iter().zip(&h.buckets) {
        cumulative += b.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let count = h.count.load(Relaxed);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum {}", h.sum_nanos.load(Relaxed) as f64 / 1e9);
    let _ = writeln!(out, "{name}_count {count}");
}

pub(crate) type Getter = fn(&RuleStats) -> &AtomicU64;

/// Each rule counter: its name, its help text and how to read it.
pub(crate) const RULE_COUNTERS: [(&str, &str, Getter); 5] = [
    ("total_hits", "Hits counted against the rule.", |s| {
        &s.total_hits
    }),
    ("over_limit", "Hits over the rule's limit.", |s| {
        &s.over_limit
    }),
    ("near_limit", "Hits above 80% of the limit.", |s| {
        &s.near_limit
    }),
    ("within_limit", "Hits within the limit.", |s| {
        &s.within_limit
    }),
    (
        "shadow_mode",
        "Over-limit hits let through by shadow mode.",
        |s| &s.shadow_mode,
    ),
];

pub(super) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
