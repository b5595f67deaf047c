//! statsd over UDP (`--statsd-addr`), with the reference's stat names, so the
//! dashboards and alerts built on envoyproxy/ratelimit keep working:
//! `ratelimit.service.rate_limit.<domain>.<stats key>.{total_hits,over_limit,
//! near_limit,within_limit,shadow_mode}` for every rule (and every
//! `detailed_metric` label set), `ratelimit.service.global_shadow_mode`,
//! `ratelimit.service.config_load_success` / `config_load_error`,
//! `ratelimit_server.ShouldRateLimit.total_requests` and
//! `ratelimit_server.ShouldRateLimit.response_time` (the interval's mean, in
//! ms). Counters are sent as the increase since the last flush; names are
//! sanitised as the reference does (`:` and `|` become `_`, and so do the
//! dots of an IPv4 address). DogStatsD tags (`--statsd-tags`) are appended.
//!
//! The Prometheus `/metrics` stays; this reads the same counters, so the
//! request path pays nothing for it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::{Metrics, RULE_COUNTERS, RuleKey, ServiceTotals};

/// Bytes of one datagram: fits a 1500-byte MTU with room for headers.
const PACKET: usize = 1432;

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct StatsdConfig {
    pub addr: SocketAddr,
    pub interval: Duration,
    /// DogStatsD tags (`key:value`), sent with every stat; empty for plain statsd.
    pub tags: Vec<String>,
    /// DogStatsD mogrifiers: stat names rewritten into a name and tags.
    pub mogrifiers: Vec<Mogrifier>,
}

/// The reference's DogStatsD "mogrifier": a stat whose name matches
/// `pattern` is sent as `name` (with `$1`... from the match) and the tags
/// `tags` (`key:$1,...`), as `USE_DOG_STATSD_MOGRIFIERS` and the
/// `DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}` variables configure it.
#[derive(Debug, Clone)]
pub struct Mogrifier {
    pub pattern: regex::Regex,
    pub name: String,
    pub tags: Vec<String>,
}

impl Mogrifier {
    /// The mogrifiers named in `USE_DOG_STATSD_MOGRIFIERS`, read from the
    /// reference's environment variables.
    pub fn from_env() -> Result<Vec<Mogrifier>, String> {
        let Ok(list) = std::env::var("USE_DOG_STATSD_MOGRIFIERS") else {
            return Ok(Vec::new());
        };
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                let var = |part: &str| std::env::var(format!("DOG_STATSD_MOGRIFIER_{n}_{part}"));
                let pattern = var("PATTERN")
                    .map_err(|_| format!("DOG_STATSD_MOGRIFIER_{n}_PATTERN is not set"))?;
                Ok(Mogrifier {
                    pattern: regex::Regex::new(&pattern)
                        .map_err(|e| format!("mogrifier {n}: {e}"))?,
                    name: var("NAME").unwrap_or_else(|_| "$0".into()),
                    tags: var("TAGS")
                        .unwrap_or_default()
                        .split(',')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect(),
                })
            })
            .collect()
    }

    /// The new name and tags for `stat`, if it matches.
    fn apply(&self, stat: &str) -> Option<(String, Vec<String>)> {
        let caps = self.pattern.captures(stat)?;
        let expand = |template: &str| {
            let mut out = String::new();
            caps.expand(template, &mut out);
            out
        };
        Some((
            expand(&self.name),
            self.tags.iter().map(|t| expand(t)).collect(),
        ))
    }
}

/// `stat:value|type` with the tags of `base` and of the first mogrifier
/// that matches.
fn line(stat: &str, value: &str, kind: &str, base: &[String], mogrifiers: &[Mogrifier]) -> String {
    let (name, extra) = mogrifiers
        .iter()
        .find_map(|m| m.apply(stat))
        .unwrap_or_else(|| (stat.to_owned(), Vec::new()));
    let tags: Vec<&str> = base.iter().chain(&extra).map(String::as_str).collect();
    if tags.is_empty() {
        format!("{name}:{value}|{kind}")
    } else {
        format!("{name}:{value}|{kind}|#{}", tags.join(","))
    }
}

/// The reference's stat name rules: `:` and `|` become `_`, and the dots
/// inside an IPv4 address too.
pub fn sanitize(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(ip) = ipv4_at(bytes, i).and_then(|len| name.get(i..i + len)) {
            out.push_str(&ip.replace('.', "_"));
            i += ip.len();
            continue;
        }
        let Some(c) = name.get(i..).and_then(|rest| rest.chars().next()) else {
            break;
        };
        out.push(if c == ':' || c == '|' { '_' } else { c });
        i += c.len_utf8();
    }
    out
}

/// The length of an IPv4 literal starting at `i` (not inside a longer run
/// of digits and dots), if there is one.
fn ipv4_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && b.get(i - 1).is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut j = i;
    for part in 0..4 {
        let start = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) && j - start < 3 {
            j += 1;
        }
        if j == start {
            return None;
        }
        if part < 3 {
            if b.get(j) != Some(&b'.') {
                return None;
            }
            j += 1;
        }
    }
    if b.get(j).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    Some(j - i)
}

/// What was sent last, to send increases.
#[derive(Default)]
struct Sent {
    rules: HashMap<RuleKey, [u64; 5]>,
    service: ServiceTotals,
}

impl Sent {
    /// The lines for everything that changed since the last call.
    fn lines(
        &mut self,
        metrics: &Metrics,
        tags: &[String],
        mogrifiers: &[Mogrifier],
    ) -> Vec<String> {
        let mut lines = self.rule_lines(metrics, tags, mogrifiers);
        self.service_lines(metrics, tags, mogrifiers, &mut lines);
        lines
    }

    /// The per-rule counters that grew since the last flush.
    fn rule_lines(
        &mut self,
        metrics: &Metrics,
        tags: &[String],
        mogrifiers: &[Mogrifier],
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for (key, stats) in metrics.rule_snapshot() {
            let last = self.rules.entry(key.clone()).or_default();
            for (i, (name, _, get)) in RULE_COUNTERS.iter().enumerate() {
                let now = get(&stats).load(Relaxed);
                let Some(prev) = last.get_mut(i) else {
                    continue;
                };
                if now > *prev {
                    let stat = sanitize(&format!(
                        "ratelimit.service.rate_limit.{}.{}.{name}",
                        key.0, key.1
                    ));
                    lines.push(line(
                        &stat,
                        &(now - *prev).to_string(),
                        "c",
                        tags,
                        mogrifiers,
                    ));
                    *prev = now;
                }
            }
        }
        lines
    }

    /// The service's own counters that grew, and the mean response time.
    fn service_lines(
        &mut self,
        metrics: &Metrics,
        tags: &[String],
        mogrifiers: &[Mogrifier],
        lines: &mut Vec<String>,
    ) {
        let now = metrics.service_totals();
        let was = std::mem::replace(&mut self.service, now);
        for (stat, n, w) in [
            (
                "ratelimit.service.global_shadow_mode",
                now.global_shadow_mode,
                was.global_shadow_mode,
            ),
            (
                "ratelimit.service.config_load_success",
                now.config_loads,
                was.config_loads,
            ),
            (
                "ratelimit.service.config_load_error",
                now.config_load_errors,
                was.config_load_errors,
            ),
            (
                "ratelimit.service.domain_not_found",
                now.domain_not_found,
                was.domain_not_found,
            ),
            (
                "ratelimit_server.ShouldRateLimit.total_requests",
                now.requests,
                was.requests,
            ),
        ] {
            if n > w {
                lines.push(line(stat, &(n - w).to_string(), "c", tags, mogrifiers));
            }
        }
        let count = now.latency_count.saturating_sub(was.latency_count);
        if count > 0 {
            let nanos = now.latency_nanos.saturating_sub(was.latency_nanos);
            let ms = nanos as f64 / count as f64 / 1e6;
            lines.push(line(
                "ratelimit_server.ShouldRateLimit.response_time",
                &format!("{ms:.3}"),
                "ms",
                tags,
                mogrifiers,
            ));
        }
    }
}

/// Lines packed into datagrams of at most [`PACKET`] bytes.
fn packets(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in lines {
        if !cur.is_empty() && cur.len() + 1 + line.len() > PACKET {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push('\n');
        }
        cur.push_str(line);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Flushes every `interval` until `token` is cancelled, then once more.
pub async fn run(cfg: StatsdConfig, metrics: Arc<Metrics>, token: CancellationToken) {
    let bind: SocketAddr = if cfg.addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = match UdpSocket::bind(bind).await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "statsd: cannot open a UDP socket; statsd is off");
            return;
        }
    };
    let mut sent = Sent::default();
    let mut tick = tokio::time::interval(cfg.interval.max(Duration::from_millis(10)));
    let mut warned = false;
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            () = token.cancelled() => true,
        };
        for packet in packets(&sent.lines(&metrics, &cfg.tags, &cfg.mogrifiers)) {
            // UDP: a lost datagram is a lost increment, as with the reference.
            if let Err(e) = socket.send_to(packet.as_bytes(), cfg.addr).await
                && !warned
            {
                warn!(error = %e, addr = %cfg.addr, "statsd: send failed (logged once)");
                warned = true;
            }
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
#[path = "statsd_tests.rs"]
mod tests;
