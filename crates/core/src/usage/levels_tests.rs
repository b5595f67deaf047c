use super::*;

#[test]
fn levels_are_exact_then_at_most_five_percent_apart() {
    for (i, pair) in LEVELS.windows(2).enumerate() {
        let (a, b) = (pair[0], pair[1]);
        assert!(b > a);
        if a >= EXACT {
            assert!((b - a) as f64 <= a as f64 * 0.05 + 1.0, "{i}: {a} -> {b}");
        }
    }
    assert!(len() < 450, "{}", len());
    assert_eq!(&LEVELS[..3], &[1, 2, 3]);
}

#[test]
fn the_index_counts_the_levels_reached() {
    assert_eq!(index(0), 0);
    assert_eq!(index(1), 1);
    assert_eq!(index(32), 32);
    for c in [33, 34, 100, 1_000, 123_456, 1 << 31] {
        let i = index(c);
        assert!(level(i - 1) <= c && c < level(i), "{c}: {i}");
    }
    assert_eq!(index(u64::MAX), len());
}
