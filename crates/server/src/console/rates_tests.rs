use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::*;

fn rules(n: usize) -> Vec<Arc<RuleStats>> {
    (0..n).map(|_| Arc::new(RuleStats::default())).collect()
}

fn sample(r: &mut Rates, snapshot: usize, stats: &[Arc<RuleStats>]) {
    r.sample(snapshot, stats.iter().enumerate().map(|(i, s)| ((0, i), s)));
}

fn hit(s: &RuleStats, n: u64) {
    s.total_hits.fetch_add(n, Relaxed);
}

#[test]
fn rates_are_per_second_and_bounded() {
    let stats = rules(1);
    let mut r = Rates::default();
    sample(&mut r, 1, &stats);
    for i in 1..(SAMPLES as u64 + 20) {
        hit(&stats[0], i);
        sample(&mut r, 1, &stats);
    }
    let s = r.of(&stats[0]);
    assert_eq!(s.len(), SAMPLES);
    assert_eq!(s.last().unwrap()[0], SAMPLES as u32 + 19);
    // A rule that is gone (a new snapshot without it) is forgotten.
    sample(&mut r, 2, &[]);
    assert!(r.of(&stats[0]).is_empty());
}

#[test]
fn quiet_rules_hold_no_graph() {
    let stats = rules(10_000);
    let mut r = Rates::default();
    for _ in 0..3 {
        sample(&mut r, 1, &stats);
    }
    assert!(r.graphs.is_empty());
    assert!(r.busiest().is_empty());
    // The first second a rule counts, near and over-limit hits included.
    hit(&stats[4321], 7);
    stats[4321].over_limit.fetch_add(2, Relaxed);
    sample(&mut r, 1, &stats);
    assert_eq!(r.of(&stats[4321]), vec![[7, 0, 2]]);
    assert_eq!(r.busiest(), vec![(0, 4321)]);
}

#[test]
fn a_graph_goes_after_three_quiet_minutes() {
    let stats = rules(2);
    let mut r = Rates::default();
    sample(&mut r, 1, &stats);
    hit(&stats[1], 1);
    for _ in 0..SAMPLES {
        sample(&mut r, 1, &stats);
        assert_eq!(r.busiest(), vec![(0, 1)]);
    }
    sample(&mut r, 1, &stats);
    assert!(r.busiest().is_empty());
    // And comes back with the next hit.
    hit(&stats[1], 3);
    sample(&mut r, 1, &stats);
    assert_eq!(r.of(&stats[1]), vec![[3, 0, 0]]);
}

#[test]
fn past_the_bound_the_busier_take_the_places() {
    let stats = rules(6);
    let mut r = Rates::new(2, WALKED);
    sample(&mut r, 1, &stats);
    hit(&stats[0], 1);
    hit(&stats[1], 2);
    hit(&stats[2], 3);
    sample(&mut r, 1, &stats);
    assert_eq!(r.busiest(), vec![(0, 2), (0, 1)]);
    assert_eq!(r.ungraphed, 1);
    // A newcomer busier than a graphed rule lately takes its place.
    hit(&stats[5], 100);
    sample(&mut r, 1, &stats);
    assert_eq!(r.busiest(), vec![(0, 5), (0, 2)]);
    assert_eq!(r.graphs.len(), 2);
}

#[test]
fn a_new_snapshot_moves_places_and_keeps_graphs() {
    let stats = rules(3);
    let mut r = Rates::default();
    sample(&mut r, 1, &stats);
    hit(&stats[2], 5);
    sample(&mut r, 1, &stats);
    // A reload put the same rule (same counters) first.
    let moved = [stats[2].clone(), stats[0].clone()];
    hit(&stats[2], 4);
    sample(&mut r, 2, &moved);
    assert_eq!(r.of(&stats[2]), vec![[5, 0, 0], [4, 0, 0]]);
    assert_eq!(r.busiest(), vec![(0, 0)]);
    assert_eq!(r.snapshot(), 2);
}

#[test]
fn a_sample_looks_at_a_slice_and_a_pass_sees_every_rule_wake() {
    let stats = rules(10);
    let mut r = Rates::new(GRAPHED, 4);
    sample(&mut r, 1, &stats);
    // Rule 9 wakes; samples look at 0..4, 4..8, then 8..10.
    hit(&stats[9], 5);
    sample(&mut r, 1, &stats);
    sample(&mut r, 1, &stats);
    assert!(r.of(&stats[9]).is_empty(), "not yet looked at");
    assert_eq!(r.cursor, 8);
    hit(&stats[9], 2);
    sample(&mut r, 1, &stats);
    // Its first second holds every hit since it was last looked at.
    assert_eq!(r.of(&stats[9]), vec![[7, 0, 0]]);
    // And the pass starts again.
    hit(&stats[0], 1);
    sample(&mut r, 1, &stats);
    assert_eq!(r.of(&stats[0]), vec![[1, 0, 0]]);
}
