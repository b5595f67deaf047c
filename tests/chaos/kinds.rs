//! The checker's promises for rules of their own kind (see `fleet.rs`):
//!
//! - **A shadow rule never refuses** (`shadow_mode: true`: "count and
//!   report, never block"), whatever its count and whatever fails.
//! - **A refund is never refused** ("a refund is never OVER_LIMIT").
//! - **Slots in flight stay within `max_in_flight`** (concurrency rules, "at
//!   most `max_in_flight` requests in flight"): at no moment of a healthy
//!   span do more slots hold than the limit, a slot held certainly from its
//!   take's answer until its release was sent.

use super::checker::{Report, active, tally, touched};
use super::fleet::{CONCURRENCY, SHADOW};
use super::history::{Answer, History, Op};

pub const SHADOW_NEVER_REFUSES: &str = "shadow rule never refuses";
pub const REFUND_NEVER_REFUSED: &str = "refund never refused";
pub const IN_FLIGHT: &str = "slots in flight within the limit";

/// The longest a slot is certainly held: from its take's answer, a pause
/// of at most 60 ms (far longer on a flooded host), then its release sent.
const HOLD_MS: u64 = 10_000;

pub fn check(h: &History, r: &mut Report) {
    never_refused(h, r, SHADOW_NEVER_REFUSES, |o| {
        o.rule == SHADOW && !o.refund
    });
    never_refused(h, r, REFUND_NEVER_REFUSED, |o| o.refund);
    in_flight(h, r);
}

fn never_refused(h: &History, r: &mut Report, promise: &'static str, of: impl Fn(&Op) -> bool) {
    for o in h.ops.iter().filter(|o| of(o)) {
        let wrong = o.answer == Answer::OverLimit;
        let kinds = active(h, (o.sent, o.answered + 1));
        tally(r, &kinds, promise, wrong);
        if wrong {
            r.violations.push(format!(
                "seed {}: instance {} refused {}={} ({} hits{}) at {}; faults then: {kinds:?}",
                h.seed,
                o.instance,
                o.rule,
                o.value,
                o.hits,
                if o.refund { ", a refund" } else { "" },
                o.sent
            ));
        }
    }
}

/// Sweeps the slots' certain holds (take answered admitted, until its
/// release was sent), and at each take's answer counts those held.
fn in_flight(h: &History, r: &mut Report) {
    let (rule, max) = CONCURRENCY;
    let releases: std::collections::HashMap<(u64, &str), u64> = h
        .ops
        .iter()
        .filter(|o| o.rule == rule && o.refund && o.slot > 0)
        .map(|o| ((o.slot, o.value.as_str()), o.sent))
        .collect();
    // (counter value, from, until) of every slot certainly held.
    let mut holds: Vec<(&str, u64, u64)> = h
        .ops
        .iter()
        .filter(|o| o.rule == rule && !o.refund && o.answer == Answer::Ok)
        .filter_map(|o| {
            let until = releases.get(&(o.slot, o.value.as_str()))?;
            (*until > o.answered).then_some((o.value.as_str(), o.answered, *until))
        })
        .collect();
    holds.sort_by_key(|(_, from, _)| *from);
    for (value, at, _) in &holds {
        if touched(h, (*at, at + 1)) {
            continue;
        }
        // A hold lasts at most a client's timeout and its pause: look that
        // far back only.
        let first = holds.partition_point(|(_, from, _)| from + HOLD_MS < *at);
        let last = holds.partition_point(|(_, from, _)| from <= at);
        let held = holds[first..last]
            .iter()
            .filter(|(v, _, until)| v == value && *at < *until)
            .count();
        let wrong = held > max as usize;
        let kinds = active(h, (*at, at + 1));
        tally(r, &kinds, IN_FLIGHT, wrong);
        if wrong {
            r.violations.push(format!(
                "seed {}: {rule}={value} held {held} slots at {at}, max_in_flight {max}; faults then: {kinds:?}",
                h.seed
            ));
        }
    }
}
