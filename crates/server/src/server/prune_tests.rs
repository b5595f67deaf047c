use super::*;

/// The sweeps that walk over `ticks` seconds of (generation, freed).
fn walks(ticks: &[(u64, u64)]) -> Vec<usize> {
    let mut p = Prune::default();
    (0..ticks.len())
        .filter(|i| p.due(ticks[*i].0, ticks[*i].1))
        .collect()
}

#[test]
fn a_load_walks_the_rules_a_few_times_not_each_second_for_a_while() {
    // Loaded at 0; the old snapshot freed at 7 (a million rules compile
    // in seconds); nothing more for 30 s.
    let ticks: Vec<(u64, u64)> = (0..30).map(|t| (2, u64::from(t >= 7))).collect();
    assert_eq!(walks(&ticks), vec![7, 8, 9, 14]);
}

#[test]
fn nothing_loaded_or_freed_never_walks() {
    assert!(walks(&[(0, 0); 40]).is_empty());
}

#[test]
fn each_free_walks_again() {
    let mut ticks: Vec<(u64, u64)> = (0..10).map(|t| (1, u64::from(t >= 1))).collect();
    ticks.extend((10..14).map(|_| (1, 2)));
    assert_eq!(walks(&ticks), vec![1, 2, 3, 10, 11, 12]);
}
