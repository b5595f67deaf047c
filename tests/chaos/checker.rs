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
//! - **No refusal under the limit** ("the office is admitted again at once,
//!   on every instance within half a second" of a reset; a remembered
//!   refusal is trusted half a second): in a healthy window, a request
//!   refused more than [`STALE_MS`] after any reset of its counter must not
//!   have fitted under the limit, counting everything that could have been
//!   counted before it (see `refusals.rs`).
//! - **Resets** (an operator's, mid-flood): each reset inside a window gives
//!   the counter its limit again, so the exact and policy bounds grow by a
//!   limit for each.
//!
//! An admitted operation counts in a window only when it was both sent and
//! answered inside it (one that spans a boundary could be either window's),
//! so the checker never blames a count it cannot place.

use std::collections::BTreeMap;

use super::fleet::{AFTER, AFTER_CREDIT, BUCKET, RULES, SHADOW, STORE_TIMEOUT_MS};
use super::history::{Answer, Fault, History, Op, Reset};

/// Slack on an answer's time beyond `--redis-timeout`.
pub const GRACE_MS: u64 = 1_500;
/// How long around a store fault or a `degraded` span a window counts as
/// touched: the observer reads `/readyz` every 100 ms, and a request
/// decided by the policy just before it says so is still the fault's.
const MARGIN_MS: u64 = 500;
/// How long a reload may take to reach every instance (file events are
/// debounced up to 400 ms; the poll catches a missed one within 2 s).
const RELOAD_MS: u64 = 3_000;
/// How long after a reset an instance may still refuse from a count it
/// remembered: a remembered refusal and a lease are trusted half a second
/// ("within half a second no instance sharing the store refuses from its
/// local cache"), plus this machine's scheduling.
pub const STALE_MS: u64 = 500 + 100;
/// How late a reset sent to an instance that did not answer may still be
/// carried out (a stopped instance reads it when continued; a fault lasts
/// at most 3 s).
const UNANSWERED_RESET_MS: u64 = 4_000;

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
    /// Masters a Sentinel named in turn (0 elsewhere).
    pub masters: usize,
    /// Slots moved between Cluster masters (0 elsewhere).
    pub slots_moved: usize,
    /// (fault kind or "none", promise) -> windows or answers checked.
    pub table: BTreeMap<(String, &'static str), Tally>,
    pub violations: Vec<String>,
    /// Trips put down to the instance's link silent (the store through
    /// its proxy, its pulse unanswered for a stall, `pulse.rs`) while no
    /// fault was applied to it.
    pub stalled_trips: Vec<String>,
    /// Each trip as the instance logged it, with its reason (what its
    /// clocks said): so a violation in CI says what sluice saw.
    pub trip_reasons: Vec<String>,
    /// The rule that counts after: its windows past the limit, and the
    /// most admitted in one (held to its bound in `table`).
    pub after_over: usize,
    pub after_most: u64,
}

pub const EXACT: &str = "exact count";
pub const POLICY: &str = "failure policy bound";
pub const LATENCY: &str = "answer within timeout";
pub const REFERENCE: &str = "reference key holds the hits";
pub const NO_FALSE_REFUSAL: &str = "no refusal under the limit";
pub const COUNT_AFTER: &str = "counting after bound";

pub fn check(h: &History, instances: usize) -> Report {
    let mut r = Report {
        ops: h.ops.len(),
        ..Report::default()
    };
    windows(h, instances, &mut r);
    latency(h, &mut r);
    reference(h, &mut r);
    super::refusals::check(h, instances, &mut r);
    super::kinds::check(h, &mut r);
    super::breaker::check(h, instances, &mut r);
    super::advice::check(h, instances, &mut r);
    r
}

pub fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The lowest and highest limits in force for `rule` at some moment of
/// `span` (a reload reaches instances one by one).
pub fn limits_in_force(h: &History, rule: &str, base: u32, span: (u64, u64)) -> (u32, u32) {
    let mut limit = base;
    let mut changes: Vec<_> = h.changes.iter().filter(|c| c.rule == rule).collect();
    changes.sort_by_key(|c| c.at);
    for c in &changes {
        if c.at <= span.0.saturating_sub(RELOAD_MS) {
            limit = c.limit;
        }
    }
    let (mut low, mut high) = (limit, limit);
    for c in changes {
        if overlaps(
            (c.at, c.at + RELOAD_MS),
            (span.0.saturating_sub(RELOAD_MS), span.1),
        ) {
            low = low.min(c.limit);
            high = high.max(c.limit);
        }
    }
    (low, high)
}

/// When a reset may have taken effect by: its answer, or for one never
/// answered (its instance stopped, killed or cut off) as late as a stopped
/// instance may still carry it out.
pub fn reset_end(x: &Reset) -> u64 {
    if x.status == 0 {
        x.sent + UNANSWERED_RESET_MS
    } else {
        x.answered
    }
}

/// Resets of `rule=value` that may have emptied it inside `span`.
fn resets_in(h: &History, rule: &str, value: &str, span: (u64, u64)) -> u64 {
    h.resets
        .iter()
        .filter(|x| x.rule == rule && x.value == value)
        .filter(|x| overlaps((x.sent, reset_end(x) + 1), span))
        .count() as u64
}

/// Whether a store fault or a `degraded` span came near `span`.
pub fn touched(h: &History, span: (u64, u64)) -> bool {
    let near = (span.0.saturating_sub(MARGIN_MS), span.1 + MARGIN_MS);
    h.faults
        .iter()
        .any(|f| f.store && overlaps((f.start, f.end + MARGIN_MS), near))
        || h.degraded.iter().any(|d| overlaps((d.start, d.end), near))
}

fn reference(h: &History, r: &mut Report) {
    for read in &h.reference {
        let span = (read.window, read.window + 1_000);
        if touched(h, span) || resets_in(h, read.rule, &read.value, span) > 0 {
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
        let wrong = read.count != Some(hits);
        let active = active(h, span);
        tally(r, &active, REFERENCE, wrong);
        if wrong {
            r.violations.push(format!(
                "seed {}: {}={} window {}: the reference's key holds {:?}, {hits} hits were admitted; faults then: {active:?}",
                h.seed, read.rule, read.value, read.window, read.count
            ));
        }
    }
}

/// (rule, value, window start) -> hits admitted inside it, answered before
/// its end.
fn admitted(h: &History) -> BTreeMap<(&str, &str, u64), u64> {
    let mut admitted: BTreeMap<(&str, &str, u64), u64> = BTreeMap::new();
    // A shadow rule admits past its limit by design (`kinds.rs` holds it
    // to its own promise); refunds and slots admit no hits.
    let hits = h
        .ops
        .iter()
        .filter(|o| o.answer == Answer::Ok && !o.refund && o.rule != SHADOW);
    for o in hits {
        let Some((_, _, len)) = RULES.iter().find(|(k, _, _)| *k == o.rule) else {
            continue;
        };
        let w = o.sent / len * len;
        if o.answered < w + len {
            *admitted.entry((o.rule, &o.value, w)).or_default() += u64::from(o.hits);
        }
    }
    admitted
}

fn windows(h: &History, instances: usize, r: &mut Report) {
    let admitted = admitted(h);
    let mut refunds: Vec<&Op> = h.ops.iter().filter(|o| o.refund).collect();
    refunds.sort_by_key(|o| o.sent);
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
        let lost = store_faults.iter().any(|f| lost(h, f));
        let limit = u64::from(limits_in_force(h, rule, *base, span).1);
        // Each reset inside the window gives the counter its limit again.
        let resets = resets_in(h, rule, value, span);
        // What was given back inside the window may be admitted again.
        let back = refunded(&refunds, rule, value, span);
        // A bucket admits its burst (the limit) and a limit's refill in a
        // window; a reset fills it again.
        let most = if rule == BUCKET { 2 * limit } else { limit };
        let credit = on_credit(h, rule, instances, touched);
        let (promise, bound) = if store_faults.is_empty() && !degraded {
            let promise = if rule == AFTER { COUNT_AFTER } else { EXACT };
            (promise, most * (1 + resets) + back + credit)
        } else {
            (
                POLICY,
                most * (instances as u64 + 1 + u64::from(lost) + resets) + back + credit,
            )
        };
        if rule == AFTER {
            r.after_over += usize::from(hits > limit);
            r.after_most = r.after_most.max(hits);
        }
        let active = active(h, span);
        tally(r, &active, promise, hits > bound);
        if hits > bound {
            r.violations.push(format!(
                "seed {}: {rule}={value} window {w}..{}: {hits} admitted against {promise} {bound} (limit {limit}, {resets} resets); faults then: {active:?}{}",
                h.seed,
                w + len,
                if degraded { ", an instance degraded" } else { "" }
            ));
        }
    }
}

/// What a rule that counts after may admit past its bound in a window
/// (`span`): a credit per instance ("at most instances x credit past the
/// limit a window"), and one more for each instance killed then (its
/// credit not yet counted dies with it, and the instance restarted has a
/// fresh one). Nothing for any other rule.
fn on_credit(h: &History, rule: &str, instances: usize, span: (u64, u64)) -> u64 {
    if rule != AFTER {
        return 0;
    }
    let kills = h
        .faults
        .iter()
        .filter(|f| f.kind.starts_with("instance SIGKILL") && overlaps((f.start, f.end), span))
        .count();
    (instances + kills) as u64 * AFTER_CREDIT
}

/// Whether the store lost counts in `f`: a restart empty, or a Sentinel
/// naming a new master during it or just after (any fault that keeps the
/// master from the sentinels a second, a SIGSTOP too: the replica it
/// promotes lacks what it had not yet received).
fn lost(h: &History, f: &Fault) -> bool {
    let failed_over = h
        .masters
        .iter()
        .skip(1)
        .any(|&(at, _)| f.start <= at && at <= f.end + MARGIN_MS);
    f.lost || f.store && failed_over
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

/// Hits given back on `rule=value` that may have been counted inside
/// `span` (a refund not refused, answered or not).
fn refunded(refunds: &[&Op], rule: &str, value: &str, span: (u64, u64)) -> u64 {
    // Sorted by when sent; one is answered within a client's timeout.
    let first = refunds.partition_point(|o| o.sent + 10_000 < span.0);
    refunds[first..]
        .iter()
        .take_while(|o| o.sent < span.1)
        .filter(|o| o.rule == rule && o.value == value)
        .filter(|o| o.answer != Answer::OverLimit && overlaps((o.sent, o.answered + 1), span))
        .map(|o| u64::from(o.hits))
        .sum()
}

/// The faults active over `span`, or "none": the rows a check counts in.
pub fn active(h: &History, span: (u64, u64)) -> Vec<String> {
    let kinds: Vec<String> = h
        .faults
        .iter()
        .filter(|f| overlaps((f.start, f.end), span))
        .map(|f| f.kind.clone())
        .collect();
    if kinds.is_empty() {
        vec!["none".to_owned()]
    } else {
        kinds
    }
}

/// Counts one check of `promise` under each of `kinds`, and whether it failed.
pub fn tally(r: &mut Report, kinds: &[String], promise: &'static str, wrong: bool) {
    for kind in kinds {
        let t = r.table.entry((kind.clone(), promise)).or_default();
        t.checked += 1;
        t.violations += u64::from(wrong);
    }
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
