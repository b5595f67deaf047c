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

#[test]
fn both_indices_at_once_are_each_index() {
    let counts = [
        0,
        1,
        2,
        31,
        32,
        33,
        34,
        35,
        99,
        100,
        101,
        1_000,
        1_049,
        1_050,
        123_456,
        1 << 31,
        u64::MAX,
    ];
    for &a in &counts {
        for &b in &counts {
            for (x, y) in [(a, b), (a, b.saturating_add(1)), (a.saturating_sub(1), b)] {
                assert_eq!(indices(x, y), (index(x), index(y)), "{x} -> {y}");
            }
        }
    }
    for c in 0..5_000u64 {
        assert_eq!(indices(c, c + 1), (index(c), index(c + 1)), "{c}");
        assert_eq!(indices(c + 7, c), (index(c + 7), index(c)), "{c}");
    }
}
