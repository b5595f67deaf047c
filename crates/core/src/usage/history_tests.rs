use super::*;

/// A million per-customer rules each with a first request must not each
/// grow a ~100 KiB history: a budget bounds them, and a rule that leaves
/// gives its place back.
#[test]
fn histories_are_bounded_by_their_budget() {
    let budget = Arc::new(UsageBudget::new(2));
    let rules: Vec<Usage> = (0..3).map(|_| Usage::within(budget.clone())).collect();
    for u in &rules {
        u.record(60, 1000, 0, 1, 1);
    }
    // The refused rule's later requests are not counted again: the metric
    // counts rules, and a rule past the budget writes nothing shared.
    rules[2].record(60, 1000, 1, 2, 1);
    rules[2].record(60, 1001, 2, 3, 1);
    assert_eq!(budget.used(), 2);
    assert_eq!(budget.refused.load(Relaxed), 1, "one rule refused");
    assert_eq!(rules.iter().filter(|u| u.footprint() > 0).count(), 2);
    drop(rules);
    assert_eq!(budget.used(), 0, "every place given back");
    let late = Usage::within(budget.clone());
    late.record(60, 1000, 0, 1, 1);
    assert!(late.footprint() > 0);
}

#[test]
fn crossings_count_keys_per_level_and_refunds_take_them_back() {
    let u = Usage::default();
    assert!(u.periods(60, 1000, 60).is_empty(), "nothing until used");
    // Key a: 1, 2, 3; key b: 1; key c: 0 -> 5 in one go.
    for (before, after) in [(0, 1), (1, 2), (2, 3), (0, 1), (0, 5)] {
        u.record(60, 1000, before, after, after - before);
    }
    let p = &u.periods(60, 1000, 60)[0];
    assert_eq!(&p.keys[..6], &[3, 2, 2, 1, 1, 0]);
    assert_eq!((p.hits, p.start, p.seconds), (9, 960, 60));
    // A refund of 2 on key a (3 -> 1).
    u.record(60, 1001, 3, 1, 0);
    assert_eq!(&u.periods(60, 1001, 60)[0].keys[..4], &[3, 1, 1, 1]);
    // A refund through an instance that never counted the key's hits
    // takes it back there: that instance's share goes below 0, and the
    // fleet's sum is right.
    let other = Usage::default();
    other.record(60, 1001, 3, 1, 0);
    assert_eq!(&other.periods(60, 1001, 60)[0].keys[..4], &[0, -1, -1, 0]);
    // The next period starts empty; an hour on, the first is gone.
    u.record(60, 1020, 0, 1, 1);
    let ps = u.periods(60, 1020, 60);
    assert_eq!(ps.len(), 2);
    assert_eq!(ps[1].keys[0], 1);
    assert_eq!(
        u.periods(60, 1020 + 3600, 60).len(),
        0,
        "an hour of minutes"
    );
    assert!(u.footprint() < 128 * 1024, "{}", u.footprint());
}

/// Every configured rule holds a `Usage`, and most of a million
/// per-customer rules never keep a history: until its first record one
/// costs a pointer, the window, the budget's and the refusal flag, not its
/// totals' room (it was 104 bytes).
#[test]
fn a_usage_without_history_is_small() {
    assert!(
        std::mem::size_of::<Usage>() <= 40,
        "{}",
        std::mem::size_of::<Usage>()
    );
}

/// Requests racing into a period's first record each keep their count:
/// the slot is emptied before any of them writes (a count lost there made
/// the fleet's figures one hit short on a fresh instance).
#[test]
fn the_first_records_of_a_period_racing_each_keep_their_count() {
    const THREADS: u64 = 4;
    const EACH: u64 = 200;
    for round in 0..300u64 {
        let u = Usage::default();
        // A period used before (64 periods ago) and a fresh one, in turn.
        let now = 60 * (1000 + round);
        if round % 2 == 1 {
            u.record(60, now - 60 * SLOTS as u64, 0, 1, 1);
        }
        let start = std::sync::Barrier::new(THREADS as usize);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..EACH {
                        u.record(60, now, 0, 1, 1);
                    }
                });
            }
        });
        let p = u.periods(60, now, 1);
        let (hits, keys) = (p[0].hits, p[0].keys[0]);
        assert_eq!(
            (hits, keys),
            (THREADS * EACH, (THREADS * EACH) as i64),
            "round {round}"
        );
    }
}
