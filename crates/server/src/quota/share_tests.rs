use super::*;

fn m(member: u64, demand: f64) -> MemberDemand {
    MemberDemand { member, demand }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn shares_always_add_up_to_the_rate() {
    for members in [
        vec![m(1, 0.0)],
        vec![m(1, 100.0), m(2, 0.0)],
        vec![m(1, 9.0), m(2, 1.0), m(3, -1.0)],
        vec![m(1, -1.0), m(2, -1.0)],
        vec![m(1, 1e9), m(2, 1e9), m(3, 0.5)],
    ] {
        let s = split(6.0, &members);
        assert!(close(s.iter().sum::<f64>(), 6.0), "{members:?} -> {s:?}");
        assert!(
            s.iter()
                .all(|x| *x >= 6.0 * FLOOR / members.len() as f64 - 1e-9)
        );
    }
    assert!(split(6.0, &[]).is_empty());
}

#[test]
fn a_flood_does_not_starve_a_quiet_envoy() {
    // 6/s to share; one Envoy floods at 600/s, the other claims 1/s (its
    // demand's upper bound): it gets that and the headroom.
    let s = split(6.0, &[m(1, 600.0), m(2, 1.0)]);
    assert!(s[1] >= 1.0 - 1e-9, "{s:?}");
    assert!(s[0] > 4.0, "{s:?}");
}

#[test]
fn skewed_demand_gets_the_larger_share() {
    // 9:1 under the budget's even part for the quiet one.
    let s = split(10.0, &[m(1, 18.0), m(2, 2.0)]);
    assert!(s[0] > 7.0 && s[1] >= 2.0 - 1e-9, "{s:?}");
    // Both over: an even split.
    let s = split(10.0, &[m(1, 90.0), m(2, 10.0)]);
    assert!(close(s[0], 5.0) && close(s[1], 5.0), "{s:?}");
}

#[test]
fn newcomers_are_taken_at_the_mean() {
    let s = split(10.0, &[m(1, 4.0), m(2, -1.0)]);
    assert!(close(s[0], s[1]), "{s:?}");
}

#[test]
fn buckets_round_down_and_never_hit_zero() {
    // A window's bucket holds five seconds of the share, at most a tenth
    // of the Envoy's part of the count.
    let b = bucket(3.0, -1.0, 120, 20, Algorithm::FixedWindow, 2);
    assert_eq!(
        b,
        TokenBucket {
            max_tokens: 6,
            tokens_per_fill: 60,
            fill_interval_seconds: 20
        }
    );
    let tiny = bucket(0.0001, -1.0, 5, 3600, Algorithm::FixedWindow, 2);
    assert_eq!((tiny.max_tokens, tiny.tokens_per_fill), (1, 1));
    // At least six tokens where a tenth of the count allows it.
    let long = bucket(0.5, -1.0, 3600, 3600, Algorithm::FixedWindow, 2);
    assert_eq!((long.max_tokens, long.tokens_per_fill), (6, 1800));
    // A quiet Envoy's cap is a tenth of an even part, not of its own.
    let quiet = bucket(0.5, -1.0, 120, 60, Algorithm::FixedWindow, 2);
    assert_eq!((quiet.max_tokens, quiet.tokens_per_fill), (6, 30));
    // A hundred Envoys on 120 a minute: bursts of one, so a round of
    // replacements cannot double the budget.
    let crowd = bucket(0.05, -1.0, 120, 60, Algorithm::FixedWindow, 100);
    assert_eq!((crowd.max_tokens, crowd.tokens_per_fill), (1, 3));
    // An Envoy asking for far more than its share spends each token as it
    // comes: its bucket holds a second of the share, so a replacement that
    // refills it lets little past the budget; one asking for its share keeps
    // the full burst.
    let pressed = bucket(1.3, 18.0, 120, 60, Algorithm::FixedWindow, 2);
    assert_eq!((pressed.max_tokens, pressed.tokens_per_fill), (2, 78));
    let asking = bucket(1.3, 1.3, 120, 60, Algorithm::FixedWindow, 2);
    assert_eq!((asking.max_tokens, asking.tokens_per_fill), (7, 78));
    let pressed_crowd = bucket(0.05, 9.0, 120, 60, Algorithm::FixedWindow, 100);
    assert_eq!(pressed_crowd.max_tokens, 1);
    let tb = bucket(5.0, -1.0, 10, 1, Algorithm::token_bucket(10, 1, 40), 2);
    assert_eq!((tb.max_tokens, tb.tokens_per_fill), (20, 5));
}

#[test]
fn small_moves_are_not_pushed() {
    let held = Assignment::Bucket(bucket(3.0, -1.0, 120, 20, Algorithm::FixedWindow, 2));
    let near = Assignment::Bucket(bucket(3.2, -1.0, 120, 20, Algorithm::FixedWindow, 2));
    let far = Assignment::Bucket(bucket(4.0, -1.0, 120, 20, Algorithm::FixedWindow, 2));
    assert!(!worth_pushing(Some(&held), &near));
    assert!(worth_pushing(Some(&held), &far));
    assert!(worth_pushing(Some(&held), &Assignment::AllowAll));
    assert!(worth_pushing(None, &held));
}
