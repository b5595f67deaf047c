use super::*;

fn counted(limit: u32, hits: u64, after: u64) -> Counted {
    Counted {
        requests_per_unit: limit,
        window: Window::containing(Unit::Minute, Now(1_000_000)),
        algorithm: Algorithm::FixedWindow,
        hits,
        tally: Tally::Count(after),
        elapsed_ms: 0,
        shadow: false,
        quota: false,
        near_ratio: NEAR_LIMIT_RATIO,
    }
}

const NOW: Now = Now(1_000_000);

#[test]
fn hits_addend_rules() {
    assert_eq!(hits(0, None), 1, "request-level 0 means 1");
    assert_eq!(hits(5, None), 5);
    assert_eq!(
        hits(5, Some(0)),
        0,
        "a present per-descriptor 0 checks only"
    );
    assert_eq!(hits(0, Some(7)), 7, "a present per-descriptor addend wins");
}

#[test]
fn over_only_when_the_count_after_exceeds_the_limit() {
    let at = status(&counted(10, 1, 10), NOW);
    assert!(!at.over);
    assert_eq!(at.remaining, 0);
    let past = status(&counted(10, 1, 11), NOW);
    assert!(past.over);
    assert_eq!(past.remaining, 0);
    let first = status(&counted(10, 1, 1), NOW);
    assert_eq!(first.remaining, 9);
    assert_eq!(first.reset_seconds, 20);
}

#[test]
fn a_limit_of_zero_blocks_everything() {
    assert!(status(&counted(0, 1, 1), NOW).over);
}

#[test]
fn check_only_does_not_tip_over() {
    // hits 0 and a counter at the limit: still within.
    assert!(!status(&counted(3, 0, 3), NOW).over);
    assert!(status(&counted(3, 0, 4), NOW).over);
}

#[test]
fn near_limit_numbers_match_the_reference() {
    // TestNearLimit: 15/h, counts 11, 13, 16.
    let s = status(&counted(15, 1, 11), NOW);
    assert_eq!((s.remaining, s.stats.near_limit), (4, 0));
    let s = status(&counted(15, 1, 13), NOW);
    assert_eq!((s.remaining, s.stats.near_limit), (2, 1));
    assert!(status(&counted(15, 1, 16), NOW).over);
    // 20/s, hits 3, after 22: over 2, near 1.
    let s = status(&counted(20, 3, 22), NOW).stats;
    assert_eq!((s.over_limit, s.near_limit), (2, 1));
    // 20/s, hits 7, after 22: over 2, near 4.
    let s = status(&counted(20, 7, 22), NOW).stats;
    assert_eq!((s.over_limit, s.near_limit), (2, 4));
    // 10/s, hits 3, after 30: over 3.
    let s = status(&counted(10, 3, 30), NOW).stats;
    assert_eq!((s.over_limit, s.near_limit, s.total_hits), (3, 0, 3));
}

#[test]
fn shadow_mode_allows_and_counts() {
    let mut c = counted(2, 1, 3);
    c.shadow = true;
    let s = status(&c, NOW);
    assert!(!s.over);
    assert_eq!(s.remaining, 0);
    assert_eq!(s.stats.shadow_mode, 1);
    assert_eq!(
        summarize([&s], false),
        Summary {
            over: false,
            shadowed: false,
            retry_after: None
        }
    );
}

#[test]
fn retry_after_is_the_latest_reset_of_the_over_descriptors() {
    let mut short = status(&counted(1, 1, 2), NOW);
    short.reset_seconds = 5;
    short.retry_seconds = 5;
    let mut long = status(&counted(1, 1, 2), NOW);
    long.reset_seconds = 40;
    long.retry_seconds = 40;
    let ok = status(&counted(10, 1, 1), Now(1_000_059));
    let s = summarize([&short, &ok, &long], false);
    assert_eq!(
        s,
        Summary {
            over: true,
            shadowed: false,
            retry_after: Some(40)
        }
    );
    assert_eq!(summarize([&ok], false).retry_after, None);
}

#[test]
fn retry_after_is_at_least_one() {
    let mut s = status(&counted(1, 1, 2), NOW);
    s.reset_seconds = 0;
    s.retry_seconds = 0;
    assert_eq!(summarize([&s], false).retry_after, Some(1));
}

#[test]
fn global_shadow_allows_everything_without_retry_after() {
    let s = status(&counted(1, 1, 2), NOW);
    assert_eq!(
        summarize([&s], true),
        Summary {
            over: false,
            shadowed: true,
            retry_after: None
        }
    );
}

#[test]
fn quota_mode_is_over_only_when_every_quota_descriptor_is() {
    let mut a = counted(5, 1, 6);
    a.quota = true;
    let mut b = counted(3, 1, 1);
    b.quota = true;
    let (sa, sb) = (status(&a, NOW), status(&b, NOW));
    assert!(sa.over, "the status itself stays over");
    assert!(!summarize([&sa, &sb], false).over);
    b.tally = Tally::Count(4);
    let mut sb = status(&b, NOW);
    sb.reset_seconds = 7;
    sb.retry_seconds = 7;
    let mut sa = sa;
    sa.reset_seconds = 30;
    sa.retry_seconds = 30;
    assert_eq!(
        summarize([&sa, &sb], false),
        Summary {
            over: true,
            shadowed: false,
            retry_after: Some(7)
        }
    );
}

#[test]
fn a_bucket_in_shadow_mode_reports_but_never_blocks() {
    let c = Counted {
        requests_per_unit: 10,
        window: Window::containing(Unit::Second, NOW),
        algorithm: Algorithm::token_bucket(10, 1, 10),
        hits: 1,
        tally: Tally::Bucket {
            taken: false,
            debt_us: 1_000_000,
            asked: None,
        },
        elapsed_ms: 0,
        shadow: true,
        quota: false,
        near_ratio: NEAR_LIMIT_RATIO,
    };
    let s = status(&c, NOW);
    assert!(!s.over);
    assert_eq!(s.stats.shadow_mode, 1);
    assert_eq!(s.stats.over_limit, 1);
    assert_eq!(s.remaining, 0);
    assert_eq!(s.retry_seconds, 1);
}

#[test]
fn check_only_never_takes_a_token() {
    let r = Refill::new(10, 1, 2);
    let (tat, t) = r.take(0, 5_000_000, 2);
    assert!(matches!(t, Tally::Bucket { taken: true, .. }));
    // hits 0: admitted while not over, and nothing is taken.
    let (after, t) = r.take(tat, 5_000_000, 0);
    assert_eq!(after, tat);
    assert!(matches!(t, Tally::Bucket { taken: true, .. }));
}

#[test]
fn a_policys_decision_reads_as_a_verdict_on_every_shape() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::token_bucket(10, 60, 10),
    ] {
        let decided = |d| Counted {
            algorithm,
            tally: Tally::Decided(d),
            ..counted(10, 3, 0)
        };
        let refused = status(&decided(Decision::Refuse), NOW);
        assert!(refused.over, "{algorithm:?}");
        assert_eq!(refused.remaining, 0, "{algorithm:?}");
        // Over by exactly the request's hits: the metrics stay truthful.
        assert_eq!(refused.stats.over_limit, 3, "{algorithm:?}");
        assert_eq!(refused.stats.within_limit, 0, "{algorithm:?}");
        let admitted = status(&decided(Decision::Admit), NOW);
        assert!(!admitted.over, "{algorithm:?}");
        assert_eq!(admitted.remaining, 10, "{algorithm:?}");
        assert_eq!(admitted.stats.within_limit, 3, "{algorithm:?}");
        let shadowed = status(
            &Counted {
                shadow: true,
                ..decided(Decision::Refuse)
            },
            NOW,
        );
        assert!(
            !shadowed.over && shadowed.stats.shadow_mode == 3,
            "{algorithm:?}"
        );
    }
    let window = Window::containing(Unit::Minute, NOW);
    let refuse = Tally::Decided(Decision::Refuse);
    let admit = Tally::Decided(Decision::Admit);
    let fixed = Algorithm::FixedWindow;
    assert!(would_exceed(10, 0, &fixed, &window, &refuse, 0));
    assert!(!would_exceed(10, 5, &fixed, &window, &admit, 0));
}

/// A charge that does not fit: refused and taken nothing by a plain bucket,
/// refused and taken into debt by an overdraft one (whose check is then
/// refused until refill pays it back).
#[test]
fn an_overdraft_bucket_takes_what_does_not_fit() {
    let now = 10_000_000_000;
    let plain = Algorithm::token_bucket(1000, 60, 1000)
        .refill()
        .expect("a bucket");
    let overdraft = Algorithm::token_bucket(1000, 60, 1000)
        .with_overdraft()
        .refill()
        .expect("a bucket");
    // 900 of 1,000 spent.
    let spent = now + 900 * plain.interval_us;
    let (tat, t) = plain.take(spent, now, 300);
    assert_eq!(tat, spent, "nothing taken");
    assert!(matches!(t, Tally::Bucket { taken: false, .. }));
    let (tat, t) = overdraft.take(spent, now, 300);
    assert_eq!(tat, now + 1200 * plain.interval_us, "taken into debt");
    let Tally::Bucket {
        taken: false,
        debt_us,
        ..
    } = t
    else {
        panic!("{t:?}")
    };
    assert_eq!(debt_us, 1200 * plain.interval_us);
    // The check after is refused; a check takes nothing, even in debt.
    let (again, t) = overdraft.take(tat, now, 0);
    assert_eq!(again, tat);
    assert!(matches!(t, Tally::Bucket { taken: false, .. }));
    // Debt is bounded by what the store's numbers hold.
    let (far, _) = overdraft.take(tat, now, u64::MAX);
    assert_eq!(far, crate::limiter::refill::MAX_ARRIVAL_US);
}
