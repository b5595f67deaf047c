//! The checker: reads a history and holds it to the book's promises.
//!
//! - **Exact while the store is healthy** ("limits are exact across
//!   instances", Stores and failure): per key and window, the hits admitted
//!   are at most the limit in force, whatever else is happening (a CPU
//!   flood, an instance stopped or killed, a reload), unless the store was
//!   out of some instance's reach.
//! - **The failure policy's bound** (`--store-failure fallback`: "counts in
//!   this process's memory, so limits stay enforced per instance"): a window
//!   touched by a store fault, or by an instance's `degraded` span, admits
//!   at most what the store admitted before the fault (a limit) plus a limit
//!   per instance from its own memory, (instances + 1) x limit, and one
//!   limit more when the store restarted empty inside it (its count is
//!   gone).
//! - **No answer waits on the store** ("a store outage never adds more
//!   latency than the configured timeout"): a request to an instance that
//!   was not itself stopped or killed, outside a CPU or request flood, is
//!   answered within `--redis-timeout`
//!   plus [`GRACE_MS`] (this machine's scheduling, a debug build, other
//!   tests beside). Under a flood an answer may wait for a core; the
//!   request is shed rather than decided by the policy, which the exact
//!   count checks.
//!
//! - **A reference fleet reads the hits** (under `--key-format envoyproxy`,
//!   "swapping the image in place carries every count over"): in a healthy
//!   window where every request was admitted, the reference's key holds
//!   exactly the hits admitted.
//!
//! An admitted operation counts in a window only when it was both sent and
//! answered inside it (one that spans a boundary could be either window's),
//! so the checker never blames a count it cannot place.

use std::collections::BTreeMap;

use super::fleet::{RULES, STORE_TIMEOUT_MS};
use super::history::{Answer, History};

/// Slack on an answer's time beyond `--redis-timeout`.
pub const GRACE_MS: u64 = 1_500;
/// How long around a store fault or a `degraded` span a window counts as
/// touched: the observer reads `/readyz` every 100 ms, and a request
/// decided by the policy just before it says so is still the fault's.
const MARGIN_MS: u64 = 500;
/// How long a reload may take to reach every instance (file events are
/// debounced up to 400 ms; the poll catches a missed one within 2 s).
const RELOAD_MS: u64 = 3_000;

#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub checked: u64,
    pub violations: u64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub ops: usize,
    /// Fault kinds the nemesis applied.
    pub kinds: usize,
    /// (fault kind or "none", promise) -> windows or answers checked.
    pub table: BTreeMap<(String, &'static str), Tally>,
    pub violations: Vec<String>,
}

pub const EXACT: &str = "exact count";
pub const POLICY: &str = "failure policy bound";
pub const LATENCY: &str = "answer within timeout";
pub const REFERENCE: &str = "reference key holds the hits";

pub fn check(h: &History, instances: usize) -> Report {
    let mut r = Report {
        ops: h.ops.len(),
        ..Report::default()
    };
    windows(h, instances, &mut r);
    latency(h, &mut r);
    reference(h, &mut r);
    r
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The limit in force for `rule` in `span`: the largest of those in force
/// at some moment of it (a reload reaches instances one by one).
fn limit_in_force(h: &History, rule: &str, base: u32, span: (u64, u64)) -> u32 {
    let mut limit = base;
    let mut max = 0;
    let mut changes: Vec<_> = h.changes.iter().filter(|c| c.rule == rule).collect();
    changes.sort_by_key(|c| c.at);
    for c in &changes {
        if c.at <= span.0.saturating_sub(RELOAD_MS) {
            limit = c.limit;
        }
    }
    max = max.max(limit);
    for c in changes {
        if overlaps(
            (c.at, c.at + RELOAD_MS),
            (span.0.saturating_sub(RELOAD_MS), span.1),
        ) {
            max = max.max(c.limit);
        }
    }
    max
}

/// Whether a store fault or a `degraded` span came near `span`.
fn touched(h: &History, span: (u64, u64)) -> bool {
    let near = (span.0.saturating_sub(MARGIN_MS), span.1 + MARGIN_MS);
    h.faults
        .iter()
        .any(|f| f.store && overlaps((f.start, f.end + MARGIN_MS), near))
        || h.degraded.iter().any(|d| overlaps((d.start, d.end), near))
}

fn reference(h: &History, r: &mut Report) {
    for read in &h.reference {
        let span = (read.window, read.window + 1_000);
        if touched(h, span) {
            continue;
        }
        let ops: Vec<_> = h
            .ops
            .iter()
            .filter(|o| o.rule == read.rule && o.value == read.value)
            .filter(|o| overlaps((o.sent, o.answered + 1), span))
            .collect();
        let clean = ops
            .iter()
            .all(|o| o.answer == Answer::Ok && o.sent >= span.0 && o.answered < span.1);
        if ops.is_empty() || !clean {
            continue;
        }
        let hits: u64 = ops.iter().map(|o| u64::from(o.hits)).sum();
        let active: Vec<String> = h
            .faults
            .iter()
            .filter(|f| overlaps((f.start, f.end), span))
            .map(|f| f.kind.clone())
            .collect();
        let wrong = read.count != Some(hits);
        let kinds = if active.is_empty() {
            vec!["none".to_owned()]
        } else {
            active.clone()
        };
        for kind in kinds {
            let t = r.table.entry((kind, REFERENCE)).or_default();
            t.checked += 1;
            t.violations += u64::from(wrong);
        }
        if wrong {
            r.violations.push(format!(
                "seed {}: {}={} window {}: the reference's key holds {:?}, {hits} hits were admitted; faults then: {active:?}",
                h.seed, read.rule, read.value, read.window, read.count
            ));
        }
    }
}

fn windows(h: &History, instances: usize, r: &mut Report) {
    // (rule, value, window start) -> hits admitted inside it.
    let mut admitted: BTreeMap<(&str, &str, u64), u64> = BTreeMap::new();
    for o in h.ops.iter().filter(|o| o.answer == Answer::Ok) {
        let Some((_, _, len)) = RULES.iter().find(|(k, _, _)| *k == o.rule) else {
            continue;
        };
        let w = o.sent / len * len;
        if o.answered < w + len {
            *admitted.entry((o.rule, &o.value, w)).or_default() += u64::from(o.hits);
        }
    }
    for ((rule, value, w), hits) in admitted {
        let Some((_, base, len)) = RULES.iter().find(|(k, _, _)| *k == rule) else {
            continue;
        };
        let span = (w, w + len);
        let touched = (span.0.saturating_sub(MARGIN_MS), span.1 + MARGIN_MS);
        let store_faults: Vec<_> = h
            .faults
            .iter()
            .filter(|f| f.store && overlaps((f.start, f.end + MARGIN_MS), touched))
            .collect();
        let degraded = h
            .degraded
            .iter()
            .any(|d| overlaps((d.start, d.end), touched));
        let lost = store_faults.iter().any(|f| f.lost);
        let limit = u64::from(limit_in_force(h, rule, *base, span));
        let (promise, bound) = if store_faults.is_empty() && !degraded {
            (EXACT, limit)
        } else {
            (POLICY, limit * (instances as u64 + 1 + u64::from(lost)))
        };
        let active: Vec<String> = h
            .faults
            .iter()
            .filter(|f| overlaps((f.start, f.end), span))
            .map(|f| f.kind.clone())
            .collect();
        let kinds = if active.is_empty() {
            vec!["none".to_owned()]
        } else {
            active.clone()
        };
        for kind in kinds {
            let t = r.table.entry((kind, promise)).or_default();
            t.checked += 1;
            t.violations += u64::from(hits > bound);
        }
        if hits > bound {
            r.violations.push(format!(
                "seed {}: {rule}={value} window {w}..{}: {hits} admitted against {promise} {bound} (limit {limit}); faults then: {active:?}{}",
                h.seed,
                w + len,
                if degraded { ", an instance degraded" } else { "" }
            ));
        }
    }
}

fn latency(h: &History, r: &mut Report) {
    let bound = STORE_TIMEOUT_MS + GRACE_MS;
    for o in &h.ops {
        let span = (o.sent, o.answered.max(o.sent + 1));
        let active: Vec<&str> = h
            .faults
            .iter()
            .filter(|f| overlaps((f.start, f.end + MARGIN_MS), span))
            .map(|f| f.kind.as_str())
            .collect();
        // The instance itself stopped or killed, or the host flooded: its
        // answers are late for reasons no store timeout bounds.
        let own = h.faults.iter().any(|f| {
            overlaps((f.start, f.end + MARGIN_MS), span)
                && (f.target == Some(o.instance) && f.kind.starts_with("instance S")
                    || f.kind.starts_with("CPU"))
        });
        if own {
            continue;
        }
        let late = o.answered - o.sent > bound;
        let kinds = if active.is_empty() {
            vec!["none"]
        } else {
            active
        };
        for kind in kinds {
            let t = r.table.entry((kind.to_owned(), LATENCY)).or_default();
            t.checked += 1;
            t.violations += u64::from(late);
        }
        if late {
            r.violations.push(format!(
                "seed {}: instance {} answered {}={} after {} ms (bound {bound} ms), {:?}",
                h.seed,
                o.instance,
                o.rule,
                o.value,
                o.answered - o.sent,
                o.answer
            ));
        }
    }
}
