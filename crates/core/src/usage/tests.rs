use super::*;

#[test]
fn buckets_cross_by_tokens_asked_and_slots_by_their_windows_peak() {
    let bucket = |asked| Tally::Bucket {
        taken: true,
        debt_us: 0,
        asked,
    };
    let slots = |held, peak| Tally::Slots { held, peak };
    assert_eq!(crossing(bucket(Some(3)), 1, false), Some((2, 3, 1)));
    assert_eq!(crossing(bucket(Some(1)), 2, true), Some((3, 1, 0)));
    assert_eq!(crossing(bucket(None), 1, false), None, "unknown");
    // A key that held 2 earlier in the window and holds 1 now: nothing.
    assert_eq!(crossing(slots(1, Some(2)), 1, false), Some((2, 2, 1)));
    assert_eq!(crossing(slots(3, Some(2)), 1, false), Some((2, 3, 1)));
    assert_eq!(crossing(slots(0, None), 1, true), None, "a release");
}

#[test]
fn the_exported_histogram_is_the_last_complete_period() {
    let u = Usage::default();
    // Keys with peaks 1, 3 and 40 in the minute starting at 960.
    for (b, a) in [(0, 1), (0, 3), (0, 40)] {
        u.record(60, 1000, b, a, a - b);
    }
    assert!(histogram(&u, 1000).is_none(), "the period is not over");
    let (buckets, keys, hits) = histogram(&u, 1030).expect("complete");
    assert_eq!((keys, hits), (3, 44));
    let count = |le: f64| buckets.iter().find(|(b, _)| *b == le).map(|(_, n)| *n);
    assert_eq!(
        (count(1.0), count(3.0), count(50.0)),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 3);
    assert_eq!(buckets.len(), EXPORTED.len() + 1, "bounded");
}

#[test]
fn a_million_distinct_keys_leave_the_memory_where_it_was() {
    let u = Usage::default();
    u.record(60, 1000, 0, 1, 1);
    let before = u.footprint();
    for _ in 0..1_000_000 {
        u.record(60, 1000, 0, 1, 1);
    }
    assert_eq!(u.footprint(), before);
    assert_eq!(u.periods(60, 1000, 60)[0].keys[0], 1_000_001);
}
