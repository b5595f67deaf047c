//! The service's own families: calls by result, their latency, and config
//! loads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::stats::Histogram;
use super::{Outcome, ServiceTotals, encode};

#[derive(Debug, Default)]
pub(super) struct ServiceMetrics {
    /// By [`Outcome`], in [`CODES`] order.
    requests: [AtomicU64; CODES.len()],
    latency: Histogram,
    domain_not_found: AtomicU64,
    global_shadow_mode: AtomicU64,
    config_loads: AtomicU64,
    config_load_errors: AtomicU64,
    config_generation: AtomicU64,
}

/// The `code` label of each outcome.
const CODES: [&str; 4] = ["ok", "over_limit", "invalid", "unavailable"];

impl ServiceMetrics {
    pub(super) fn request(&self, outcome: Outcome, took: Duration) {
        let i = match outcome {
            Outcome::Ok => 0,
            Outcome::OverLimit => 1,
            Outcome::Invalid => 2,
            Outcome::Unavailable => 3,
        };
        if let Some(c) = self.requests.get(i) {
            c.fetch_add(1, Relaxed);
        }
        self.latency.observe(took);
    }

    pub(super) fn requests_total(&self) -> u64 {
        self.requests.iter().map(|c| c.load(Relaxed)).sum()
    }

    pub(super) fn global_shadow_mode(&self) {
        self.global_shadow_mode.fetch_add(1, Relaxed);
    }

    pub(super) fn domain_not_found(&self) {
        self.domain_not_found.fetch_add(1, Relaxed);
    }

    pub(super) fn config_load(&self, result: Result<u64, ()>) {
        match result {
            Ok(generation) => {
                self.config_loads.fetch_add(1, Relaxed);
                self.config_generation.store(generation, Relaxed);
            }
            Err(()) => {
                self.config_load_errors.fetch_add(1, Relaxed);
            }
        }
    }

    pub(super) fn totals(&self) -> ServiceTotals {
        let (_, latency_count, latency_nanos) = self.latency.read();
        ServiceTotals {
            requests: self.requests_total(),
            latency_count,
            latency_nanos,
            config_loads: self.config_loads.load(Relaxed),
            config_load_errors: self.config_load_errors.load(Relaxed),
            global_shadow_mode: self.global_shadow_mode.load(Relaxed),
            domain_not_found: self.domain_not_found.load(Relaxed),
        }
    }
}

impl Collector for ServiceMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        encode::counters(
            &mut enc,
            "sluice_requests",
            "ShouldRateLimit calls by overall result.",
            CODES
                .iter()
                .zip(&self.requests)
                .map(|(code, c)| ([("code", *code)], c.load(Relaxed))),
        )?;
        encode::histogram(
            &mut enc,
            "sluice_request_duration_seconds",
            "Time to answer ShouldRateLimit.",
            &self.latency,
        )?;
        for (name, help, c) in [
            (
                "sluice_domain_not_found",
                "Requests for a domain no rule defines (answered OK).",
                &self.domain_not_found,
            ),
            (
                "sluice_global_shadow_mode",
                "Over-limit requests let through by --shadow-mode.",
                &self.global_shadow_mode,
            ),
            (
                "sluice_config_loads",
                "Successful config loads.",
                &self.config_loads,
            ),
            (
                "sluice_config_load_errors",
                "Config loads rejected (the previous rules stay).",
                &self.config_load_errors,
            ),
        ] {
            encode::counter(&mut enc, name, help, c.load(Relaxed))?;
        }
        encode::gauge(
            &mut enc,
            "sluice_config_generation",
            "Generation of the rules in force.",
            gauge_value(self.config_generation.load(Relaxed)),
        )
    }
}

/// A count as a gauge's value (a gauge is signed).
pub(super) fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
