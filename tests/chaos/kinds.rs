//! The checker's promises for rules of their own kind (see `fleet.rs`):
//!
//! - **A shadow rule never refuses** (`shadow_mode: true`: "count and
//!   report, never block"), whatever its count and whatever fails.
//! - **A refund is never refused** ("a refund is never OVER_LIMIT").
//! - **Slots in flight stay within `max_in_flight`** (concurrency rules, "at
//!   most `max_in_flight` requests in flight"): at no moment of a healthy
//!   span do more slots hold than the limit, a slot held certainly from its
//!   take's answer until its release was sent or its lease ended ("a slot
//!   not given back returns after `lease`", counted from the take the store
//!   ran, so no later than `lease` after the take was sent).

use super::checker::{Report, active, tally, touched};
use super::fleet::{CONCURRENCY, SHADOW, SLOT_LEASE_MS};
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
/// release was sent or its lease ended), and at each take's answer counts
/// those held.
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
            // A take answered after its lease ran out (its instance stopped
            // with the answer in hand) holds nothing the store still keeps.
            let release = releases.get(&(o.slot, o.value.as_str()))?;
            let until = (*release).min(o.sent + SLOT_LEASE_MS);
            (until > o.answered).then_some((o.value.as_str(), o.answered, until))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(slot: u64, refund: bool, sent: u64, answered: u64) -> Op {
        Op {
            instance: 0,
            rule: CONCURRENCY.0,
            value: "v0".into(),
            hits: 1,
            refund,
            slot,
            sent,
            answered,
            answer: Answer::Ok,
        }
    }

    fn violations(ops: Vec<Op>) -> usize {
        let h = History {
            ops,
            ..History::default()
        };
        let mut r = Report::default();
        in_flight(&h, &mut r);
        r.violations.len()
    }

    /// Seed 7's 30-minute run: two takes sent just before their instance
    /// was stopped 3 s were run by the store then and answered after; their
    /// leases had ended when a third was admitted.
    #[test]
    fn a_slot_is_held_until_its_release_or_its_lease_ends() {
        let third = |at: u64| slot(3, false, at - 3, at);
        let held = |at: u64| {
            vec![
                slot(1, false, 10_000, at - 28),
                slot(2, false, 10_006, at - 25),
                third(at),
                slot(1, true, at + 19, at + 22),
                slot(2, true, at + 21, at + 24),
                slot(3, true, at + 51, at + 53),
            ]
        };
        assert_eq!(violations(held(13_009)), 0, "both leases ended");
        assert_eq!(violations(held(12_000)), 1, "both leases running");
    }
}
