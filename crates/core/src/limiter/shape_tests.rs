use super::*;

#[test]
fn gcra_takes_a_burst_then_refills_continuously() {
    // 10 per second in a bucket of 5.
    let r = Refill::new(10, 1, 5);
    assert_eq!(r.interval_us, 100_000);
    let mut tat = 0;
    let now = 1_000_000_000;
    for i in 0..5 {
        let (t, tally) = r.take(tat, now, 1);
        assert!(matches!(tally, Tally::Bucket { taken: true, .. }), "{i}");
        tat = t;
    }
    let (t, tally) = r.take(tat, now, 1);
    assert_eq!(t, tat, "a refused request takes nothing");
    let Tally::Bucket {
        taken: false,
        debt_us,
        ..
    } = tally
    else {
        panic!("{tally:?}")
    };
    assert_eq!(r.tokens(debt_us), 0);
    assert_eq!(r.wait_seconds(debt_us, 1), 1);
    // 100 ms later one token is back.
    let (_, tally) = r.take(tat, now + 100_000, 1);
    assert!(matches!(tally, Tally::Bucket { taken: true, .. }));
    // A full bucket after 500 ms, and never more than burst.
    let (_, tally) = r.take(tat, now + 10_000_000, 0);
    let Tally::Bucket { debt_us, .. } = tally else {
        panic!()
    };
    assert_eq!(r.tokens(debt_us), 5);
}

#[test]
fn gcra_refuses_more_hits_than_the_bucket_holds() {
    let r = Refill::new(60, 60, 10);
    let (tat, tally) = r.take(0, 5_000_000, 11);
    assert_eq!(tat, 0);
    assert!(matches!(tally, Tally::Bucket { taken: false, .. }));
    let (_, tally) = r.take(0, 5_000_000, 10);
    assert!(matches!(tally, Tally::Bucket { taken: true, .. }));
    // Waiting for 3 tokens from empty: 3 s at one per second.
    let Tally::Bucket { debt_us, .. } = tally else {
        panic!()
    };
    assert_eq!(r.wait_seconds(debt_us, 3), 3);
}

#[test]
fn sliding_estimate_weights_the_previous_window() {
    assert_eq!(sliding_estimate(0, 100, 0, 60_000), 100);
    assert_eq!(sliding_estimate(10, 100, 30_000, 60_000), 60);
    assert_eq!(sliding_estimate(10, 100, 60_000, 60_000), 10);
    assert_eq!(sliding_estimate(u64::MAX, u64::MAX, 1, 60_000), u64::MAX);
}

#[test]
fn sliding_wait_admits_a_client_that_waits() {
    // Limit 10; previous window had 10, this one 0, 30 s in: estimate 5,
    // so 5 more fit now; the 6th waits until enough has slid out.
    let (cur, prev, elapsed, len, limit) = (5, 10, 30_000, 60_000, 10);
    let wait = sliding_wait_seconds(cur, prev, elapsed, len, limit, 1);
    let later = elapsed + wait * 1000;
    assert!(sliding_estimate(cur, prev, later, len) < limit, "{wait}");
    assert!(wait <= 6, "not much longer than needed: {wait}");
    // This window alone is full: wait into the next one.
    let wait = sliding_wait_seconds(10, 0, 30_000, 60_000, 10, 1);
    assert!(wait > 30, "{wait}");
    let next_elapsed = (30_000 + wait * 1000) - 60_000;
    assert!(sliding_estimate(0, 10, next_elapsed, 60_000) < 10);
}
