//! The usage advisor's promise under faults ("the fleet's figures are
//! exact": each level of each key is crossed once per window across the
//! fleet, so what a candidate limit would have refused is the sum of the
//! instances' answers, [Choosing a limit](../docs/src/rules/choosing-a-limit.md)).
//!
//! The harness reads every instance's `/api/usage` for the shadow rule
//! (the advisor's workflow: count, never refuse) at several limits: just
//! before an instance is killed (its figures die with it) and at the end,
//! once every window has settled. The checker sums them and computes from
//! the history what each limit would have refused:
//!
//! - a (value, window) untouched by a store fault, a `degraded` span, a
//!   reset of its counter or an instance killed counts exactly the hits
//!   admitted inside it, more only by those it cannot place (answered
//!   with an error, or spanning a boundary);
//! - a touched one is held only to what could count it: the store before
//!   and after a restart, each instance's fallback, and each reset, each at
//!   most the hits sent in the window.

use std::collections::BTreeMap;

use super::checker::{Report, overlaps, reset_end, tally, touched};
use super::fleet::{RULES, SHADOW};
use super::history::{Answer, History};

pub const ADVICE: &str = "advisor's figures (whole run)";

/// The candidate limits asked about (all below 32, where levels are exact).
pub const LIMITS: [u64; 5] = [1, 2, 3, 4, 6];

/// One instance's answer for every limit in [`LIMITS`]: (keys refused,
/// requests refused), summed over its periods.
#[derive(Debug, Clone)]
pub struct UsageRead {
    pub instance: usize,
    pub at: u64,
    pub figures: Vec<(i64, i64)>,
}

/// What the instance at `admin` answers for the shadow rule, or `None` if
/// it did not answer every limit.
pub fn read(instance: usize, admin: std::net::SocketAddr) -> Option<UsageRead> {
    let at = super::history::now_ms();
    let mut figures = Vec::new();
    for l in LIMITS {
        let path = format!("/api/usage?domain=chaos&rule={SHADOW}&limit={l}");
        let (code, body) = super::common::http(admin, "GET", &path, "");
        let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        let mut sum = (0, 0);
        for w in v["windows"].as_array()? {
            sum.0 += w["keys_refused"].as_i64()?;
            sum.1 += w["requests_refused"].as_i64()?;
        }
        figures.push(sum);
    }
    Some(UsageRead {
        instance,
        at,
        figures,
    })
}

/// (value, window start) -> (hits admitted inside it, hits it cannot
/// place: errors and answers spanning a boundary).
fn demand(h: &History, len: u64) -> BTreeMap<(&str, u64), (u64, u64)> {
    let mut out: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for o in h.ops.iter().filter(|o| o.rule == SHADOW && !o.refund) {
        let hits = u64::from(o.hits);
        let first = o.sent / len * len;
        let certain = o.answer == Answer::Ok && o.answered < first + len;
        let mut w = first;
        while w <= o.answered.max(o.sent) {
            let entry = out.entry((o.value.as_str(), w)).or_default();
            if certain {
                entry.0 += hits;
            } else {
                entry.1 += hits;
            }
            w += len;
        }
    }
    out
}

/// How `value`'s window `span` may have been counted, when not exactly:
/// (how many counts could cross its levels, hits a count may hold beyond
/// those sent). Near a store fault or a `degraded` span: the store before
/// and after a restart and each instance's fallback. With an instance
/// killed (its figures since its last reading gone with it, and the
/// positions it had leased never given back: at most a limit) or a reset
/// (each starts the count again): the store's count, once more for each
/// reset.
fn inexact(
    h: &History,
    instances: usize,
    value: &str,
    span: (u64, u64),
    limit: u64,
) -> Option<(u64, u64)> {
    let resets = h
        .resets
        .iter()
        .filter(|x| x.rule == SHADOW && x.value == value)
        .filter(|x| overlaps((x.sent, reset_end(x) + 1), span))
        .count() as u64;
    let killed = h
        .faults
        .iter()
        .any(|f| f.kind.starts_with("instance SIGKILL") && overlaps((f.start, f.end + 1), span));
    let leased = if killed { limit } else { 0 };
    if touched(h, span) {
        Some((instances as u64 + 2 + resets, leased))
    } else {
        (killed || resets > 0).then_some((1 + resets, leased))
    }
}

/// Holds the fleet's summed figures to the bounds the history gives.
pub fn check(h: &History, instances: usize, r: &mut Report) {
    if h.usage.is_empty() {
        return;
    }
    let Some((_, limit, len)) = RULES.iter().find(|(k, _, _)| *k == SHADOW) else {
        return;
    };
    let demand = demand(h, *len);
    for (i, l) in LIMITS.iter().enumerate() {
        let (mut low, mut high) = ((0, 0), (0, 0));
        for ((value, w), (certain, unplaced)) in &demand {
            let all = certain + unplaced;
            if let Some((n, leased)) =
                inexact(h, instances, value, (*w, w + len), u64::from(*limit))
            {
                let all = all + leased;
                high.0 += n * u64::from(all > *l);
                high.1 += n * all.saturating_sub(*l);
            } else {
                low.0 += u64::from(*certain > *l);
                low.1 += certain.saturating_sub(*l);
                high.0 += u64::from(all > *l);
                high.1 += all.saturating_sub(*l);
            }
        }
        let got = h.usage.iter().fold((0i64, 0i64), |s, u| {
            let f = u.figures.get(i).copied().unwrap_or_default();
            (s.0 + f.0, s.1 + f.1)
        });
        let within = |g: i64, (lo, hi): (u64, u64)| (lo as i64..=hi as i64).contains(&g);
        let wrong = !within(got.0, (low.0, high.0)) || !within(got.1, (low.1, high.1));
        eprintln!(
            "seed {}: limit {l}: the advisor {} keys, {} requests refused; the history {}..={} keys, {}..={} requests",
            h.seed, got.0, got.1, low.0, high.0, low.1, high.1
        );
        tally(r, &["whole run".to_owned()], ADVICE, wrong);
        if wrong {
            r.violations.push(format!(
                "seed {}: at limit {l} the advisor says {} keys and {} requests refused; the history says {}..={} keys and {}..={} requests",
                h.seed, got.0, got.1, low.0, high.0, low.1, high.1
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::history::{Fault, Op};
    use super::*;

    /// `s=v0`: 4 hits in the window at 10 s (untouched) and 4 in the one at
    /// 20 s (the store stopped across it); the advisor's answer `figures`.
    fn violations(figures: Vec<(i64, i64)>) -> usize {
        let op = |at: u64| Op::admitted(SHADOW, "v0", at);
        let h = History {
            ops: [
                10_100, 10_200, 10_300, 10_400, 20_100, 20_200, 20_300, 20_400,
            ]
            .map(op)
            .to_vec(),
            faults: vec![Fault {
                kind: "store SIGSTOP".into(),
                target: None,
                start: 19_000,
                end: 22_000,
                store: true,
                lost: false,
            }],
            usage: vec![UsageRead {
                instance: 0,
                at: 30_000,
                figures,
            }],
            ..History::default()
        };
        let mut r = Report::default();
        check(&h, 2, &mut r);
        r.violations.len()
    }

    #[test]
    fn the_advisor_is_exact_where_no_fault_touched_and_bounded_where_one_did() {
        // Limits 1, 2, 3, 4, 6 over 4 hits: the untouched window alone.
        let exact = vec![(1, 3), (1, 2), (1, 1), (0, 0), (0, 0)];
        assert_eq!(violations(exact), 0);
        // The touched window counted by the store and both fallbacks.
        assert_eq!(violations(vec![(4, 12), (4, 8), (4, 4), (0, 0), (0, 0)]), 0);
        // The untouched window lost: limits 1 to 3 under their bound.
        assert_eq!(violations(vec![(0, 0), (0, 0), (0, 0), (0, 0), (0, 0)]), 3);
        // Counted past what any count could cross.
        assert_eq!(violations(vec![(6, 12), (1, 2), (1, 1), (0, 0), (0, 0)]), 1);
    }
}
