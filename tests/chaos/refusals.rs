//! The checker's promise of no refusal under the limit (see `checker.rs`):
//! each refusal in a healthy window held to what could have been counted
//! before it.

use std::collections::BTreeMap;

use super::checker::{
    NO_FALSE_REFUSAL, Report, STALE_MS, active, limits_in_force, reset_end, tally, touched,
};
use super::fleet::{BUCKET, REFUNDABLE, RULES, SHADOW, SLIDING};
use super::history::{Answer, History, Op, Reset};

/// Each key's operations, sorted by when they were sent.
fn by_key(h: &History) -> BTreeMap<(&str, &str), Vec<&Op>> {
    let mut keys: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
    for o in &h.ops {
        keys.entry((o.rule, &o.value)).or_default().push(o);
    }
    for ops in keys.values_mut() {
        ops.sort_by_key(|o| o.sent);
    }
    keys
}

/// No refusal under the limit: a request refused in a healthy window,
/// more than [`STALE_MS`] after any reset of its counter, is wrong when
/// everything that could have been counted before it (every request on the
/// counter answered since the window began or since the last reset, and
/// sent before it was answered, admitted or refused), its own hits, and a
/// lease chunk for every instance (and one stranded by a kill: an eighth of
/// the limit each, counted in the store but not yet admitted) fit the
/// lowest limit in force.
pub fn check(h: &History, instances: usize, r: &mut Report) {
    let keys = by_key(h);
    // Fixed windows only: a refundable rule's count falls by refunds this
    // cannot place, a sliding window's estimate and a bucket's level are
    // not sums of hits; shadow rules and refunds never refuse (`kinds.rs`).
    let refused = h.ops.iter().filter(|o| {
        o.answer == Answer::OverLimit
            && !o.refund
            && ![SHADOW, REFUNDABLE, SLIDING, BUCKET].contains(&o.rule)
    });
    for op in refused {
        let Some((_, base, len)) = RULES.iter().find(|(k, _, _)| *k == op.rule) else {
            continue;
        };
        let w = op.sent / len * len;
        let span = (w, w + len);
        if op.answered >= span.1 || touched(h, span) {
            continue;
        }
        let Some(since) = counting_from(h, op, w) else {
            continue;
        };
        let low = u64::from(limits_in_force(h, op.rule, *base, span).0);
        let ops = &keys[&(op.rule, op.value.as_str())];
        // A request is answered within the client's timeout of being sent.
        let timeout = u64::try_from(super::workload::CLIENT_TIMEOUT.as_millis()).unwrap_or(0);
        let first = ops.partition_point(|o| o.sent + timeout + 1_000 < since);
        let counted: u64 = ops[first..]
            .iter()
            .take_while(|o| o.sent <= op.answered)
            .filter(|o| o.answered >= since && !std::ptr::eq(**o, op))
            .map(|o| u64::from(o.hits))
            .sum();
        let slack = (instances as u64 + 1) * (low / 8);
        let wrong = counted + u64::from(op.hits) + slack <= low;
        let active = active(h, (op.sent, op.answered + 1));
        tally(r, &active, NO_FALSE_REFUSAL, wrong);
        if wrong {
            r.violations.push(format!(
                "seed {}: instance {} refused {}={} ({} hits) at {}: at most {counted} counted before it since {since} (window {w}), limit {low}; faults then: {active:?}",
                h.seed, op.instance, op.rule, op.value, op.hits, op.sent
            ));
        }
    }
}

/// Where a refusal's count starts: `None` when a reset ran too near it to
/// tell, else the last reset in its window `w` that surely emptied the
/// counter, or the window's start.
fn counting_from(h: &History, op: &Op, w: u64) -> Option<u64> {
    let resets: Vec<&Reset> = h
        .resets
        .iter()
        .filter(|x| x.rule == op.rule && x.value == op.value)
        .collect();
    if resets
        .iter()
        .any(|x| x.sent <= op.answered && reset_end(x) + STALE_MS > op.sent)
    {
        return None;
    }
    // Counted from the last reset that surely emptied the counter: one
    // answered 200. (One refused, or never answered, may have left it
    // as it was: the store down, the rule not there yet.)
    let since = resets
        .iter()
        .filter(|x| x.status == 200 && x.sent >= w && reset_end(x) + STALE_MS <= op.sent)
        .map(|x| x.sent)
        .max()
        .unwrap_or(w);
    Some(since)
}
