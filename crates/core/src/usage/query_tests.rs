use super::*;
use crate::usage::history::Usage;

/// Key i (1..=100) sends i requests, one at a time.
fn population() -> Vec<i64> {
    let u = Usage::default();
    for key in 1..=100u64 {
        for c in 1..=key {
            u.record(60, 1000, c - 1, c, 1);
        }
    }
    u.periods(60, 1000, 60)[0].keys.clone()
}

#[test]
fn a_known_population_is_answered_within_five_percent() {
    let keys = population();
    assert_eq!(at_least(&keys, 1), 100);
    assert_eq!(at_least(&keys, 30), 71, "exact below 32");
    // Past 32, within the level's 5%: keys reaching 70 are 31.
    let seventy = at_least(&keys, 70) as f64;
    assert!((seventy - 31.0).abs() <= 31.0 * 0.05 + 2.0, "{seventy}");
    assert_eq!(keys_refused(&keys, 100), 0);
    assert_eq!(keys_refused(&keys, 10), 90);
    // Exact: sum over keys of (i - 10) for i > 10 = 4095.
    let refused = requests_refused(&keys, 10) as f64;
    assert!((refused - 4095.0).abs() <= 4095.0 * 0.05, "{refused}");
    let exact = (21..=100).map(|i| i - 20).sum::<u64>() as f64;
    let refused = requests_refused(&keys, 20) as f64;
    assert!(
        (refused - exact).abs() <= exact * 0.05,
        "{refused} against {exact}"
    );
    assert_eq!(requests_refused(&keys, 100), 0);
    let p50 = quantile(&keys, 0.5);
    assert!((48..=52).contains(&p50), "{p50}");
    let p99 = quantile(&keys, 0.99) as f64;
    assert!((p99 - 99.0).abs() <= 99.0 * 0.06, "{p99}");
    assert!(max(&keys) <= 100 && max(&keys) >= 95, "{}", max(&keys));
    assert_eq!(quantile(&[0; 4], 0.5), 0);
}

/// Keys whose usage lies between the ladder's levels, just past a
/// limit: each is read at the middle of its level's span, so what the
/// limit refuses is within 5% of the exact count (reading each key at
/// the top of its span, as before, gave 10% more).
#[test]
fn requests_refused_past_a_limit_is_unbiased_between_levels() {
    let u = Usage::default();
    for peak in 101..=150u64 {
        for c in 1..=peak {
            u.record(60, 1000, c - 1, c, 1);
        }
    }
    let keys = u.periods(60, 1000, 60)[0].keys.clone();
    for limit in [100u64, 110, 125] {
        let exact: u64 = (101..=150u64).map(|p| p.saturating_sub(limit)).sum();
        let got = requests_refused(&keys, limit);
        let error = (got - exact as i64).abs() as f64;
        assert!(
            error <= exact as f64 * 0.05,
            "L={limit}: {got} against {exact}"
        );
    }
    assert_eq!(
        expected_past(101, 106, 100),
        3.0,
        "101..=105 past 100: 1..=5"
    );
    assert_eq!(expected_past(10, 11, 5), 5.0, "exact below 32");
    assert_eq!(expected_past(10, 11, 10), 0.0);
}
