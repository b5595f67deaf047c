//! **The breaker trips only on a store at fault** ("a Redis that answers,
//! late (starved of CPU by a flood on its host), is slow, not down: ... the
//! breaker never trips on it", Stores and failure): an instance says
//! `degraded` only when its store was out of its reach, a fault of the
//! store, of that instance's own link to it, or of the instance itself
//! (stopped, or killed and started again). A CPU or request flood, a
//! reload, a clock step, a slot migration or the xDS server gone, with the
//! store healthy, never hands a request to the failure policy.
//!
//! A trip within [`FOLLOW_MS`] of the instance's link silent on its own
//! (the store through its proxy, its pulse unanswered for [`STALL_MS`],
//! sluice's `QUIET`, see `pulse.rs`) is the store's fault as sluice
//! defines it: reported apart, not a violation.
//!
//! Checked per instance, once for each fault span the store was healthy in
//! and once for each quiet span between faults: a `degraded` span that
//! began inside it, and near no fault that excuses it, is a violation.
//! (The other checks excuse a window an instance was `degraded` near, so
//! without this one a breaker tripped by a flood would loosen counts
//! unseen.)

use super::checker::{Report, overlaps};
use super::history::{Fault, History};
use super::pulse::{RESOLUTION_MS, STALL_MS};

pub const BREAKER: &str = "breaker trips only on a store at fault";

/// How long after a fault that excuses it a `degraded` span may begin: the
/// observer reads `/readyz` every 100 ms, and a restarted instance dials
/// its store after it listens.
const FOLLOW_MS: u64 = 1_000;

pub fn check(h: &History, instances: usize, r: &mut Report) {
    let mut faults: Vec<&Fault> = h.faults.iter().collect();
    faults.sort_by_key(|f| f.start);
    for i in 0..instances {
        let mut tripped: Vec<(u64, u64, &str)> = evidence(h, i)
            .into_iter()
            .filter(|e| !excused(h, i, (e.0, e.1)))
            .collect();
        tripped.retain(|&(from, to, what)| match stall(h, i, (from, to)) {
            Some((start, end)) => {
                r.stalled_trips.push(format!(
                    "seed {}: instance {i} {what} between {from} and {to}; its link's pulse went unanswered {} ms from {start}",
                    h.seed,
                    end - start
                ));
                false
            }
            None => true,
        });
        for (kind, span) in units(h, &faults, i) {
            let found: Vec<_> = tripped
                .iter()
                .filter(|e| overlaps((e.0, e.1), span))
                .collect();
            let t = r.table.entry((kind.clone(), BREAKER)).or_default();
            t.checked += 1;
            t.violations += u64::from(!found.is_empty());
            for (from, to, what) in found {
                r.violations.push(format!(
                    "seed {}: instance {i} {what} between {from} and {to} with its store healthy; faults then: {kind}",
                    h.seed
                ));
            }
        }
    }
}

/// When instance `i` may have handed requests to the failure policy: the
/// start of each `degraded` span, and the readings each trip came between.
fn evidence(h: &History, i: usize) -> Vec<(u64, u64, &'static str)> {
    let degraded = h.degraded.iter().filter(|d| d.instance == i);
    let trips = h.trips.iter().filter(|t| t.instance == i);
    degraded
        .map(|d| (d.start, d.start + 1, "said degraded"))
        .chain(trips.map(|t| (t.after, t.by, "tripped its breaker")))
        .collect()
}

/// Whether a fault that puts the store out of instance `i`'s reach, or
/// stops or restarts it, came near `span`.
fn excused(h: &History, i: usize, span: (u64, u64)) -> bool {
    h.faults
        .iter()
        .any(|f| out_of_reach(f, i) && overlaps((f.start, f.end + FOLLOW_MS), span))
}

/// A stall of instance `i`'s link near `span`, if one came.
fn stall(h: &History, i: usize, span: (u64, u64)) -> Option<(u64, u64)> {
    h.stalls
        .iter()
        .filter(|s| s.instance == i)
        .map(|s| (s.start, s.end))
        .find(|&(start, end)| {
            end - start >= STALL_MS - RESOLUTION_MS && overlaps((start, end + FOLLOW_MS), span)
        })
}

/// Whether `f` puts the store out of instance `i`'s reach (a fault of the
/// store, or of that instance's link), or stops or restarts the instance.
fn out_of_reach(f: &Fault, i: usize) -> bool {
    let reaches = f.target.is_none_or(|t| t == i);
    let own = f.target == Some(i) && f.kind.starts_with("instance S");
    f.store && reaches || own
}

/// The spans instance `i` is checked over: each fault that leaves its
/// store in reach and the instance running, by its kind, and each quiet
/// span between faults as "none".
fn units(h: &History, faults: &[&Fault], i: usize) -> Vec<(String, (u64, u64))> {
    let mut out = Vec::new();
    let mut quiet_from = h.ops.iter().map(|o| o.sent).min().unwrap_or(0);
    for f in faults {
        if f.start > quiet_from {
            out.push(("none".to_owned(), (quiet_from, f.start)));
        }
        quiet_from = quiet_from.max(f.end + FOLLOW_MS);
        if !out_of_reach(f, i) {
            out.push((f.kind.clone(), (f.start, f.end + FOLLOW_MS)));
        }
    }
    let end = h.ops.iter().map(|o| o.answered).max().unwrap_or(0);
    if end > quiet_from {
        out.push(("none".to_owned(), (quiet_from, end)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::checker::Report;
    use super::super::history::{History, Op, Stall, Trip};

    /// Instance 0's trip between 5,000 and 5,100, beside `stalls` of
    /// (instance, start, end).
    fn run(stalls: &[(usize, u64, u64)]) -> Report {
        let op = |at: u64| Op::admitted("r", "v", at);
        let h = History {
            ops: vec![op(1_000), op(9_000)],
            trips: vec![Trip {
                instance: 0,
                after: 5_000,
                by: 5_100,
            }],
            stalls: stalls
                .iter()
                .map(|&(instance, start, end)| Stall {
                    instance,
                    start,
                    end,
                })
                .collect(),
            ..History::default()
        };
        let mut r = Report::default();
        super::check(&h, 1, &mut r);
        r
    }

    /// The 30-minute run at b9eef17: a trip under a request flood, no
    /// fault applied to the store. With the link's pulse steady it is a
    /// violation; with the link silent a stall's length near it, it is
    /// the store's own fault, reported apart; a stall of another
    /// instance's link excuses nothing.
    #[test]
    fn a_trip_is_the_stores_fault_only_when_its_pulse_stalled() {
        let r = run(&[]);
        assert_eq!((r.violations.len(), r.stalled_trips.len()), (1, 0));
        let r = run(&[(0, 4_900, 4_990)]);
        assert_eq!(r.violations.len(), 1, "a stall shorter than QUIET");
        let r = run(&[(1, 4_880, 4_990)]);
        assert_eq!(r.violations.len(), 1, "another instance's link");
        let r = run(&[(0, 4_880, 4_990)]);
        assert_eq!((r.violations.len(), r.stalled_trips.len()), (0, 1));
        assert!(
            r.stalled_trips[0].contains("unanswered 110 ms"),
            "{:?}",
            r.stalled_trips
        );
    }
}
