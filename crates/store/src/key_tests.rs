use super::*;

#[test]
fn underscores_cannot_make_keys_collide() {
    // The reference writes both as `d_a_b_c_...`.
    let a = CounterKey::new("d", Unit::Minute, [("a", "b_c")]);
    let b = CounterKey::new("d", Unit::Minute, [("a_b", "c")]);
    assert_ne!(a, b);
    let c = CounterKey::new("d", Unit::Minute, [("a", "b"), ("c", "")]);
    let d = CounterKey::new("d", Unit::Minute, [("a", "b_c_")]);
    assert_ne!(c, d);
    let e = CounterKey::new("d_a", Unit::Minute, [("b", "c")]);
    let f = CounterKey::new("d", Unit::Minute, [("a_b", "c")]);
    assert_ne!(e, f);
}

#[test]
fn units_separate_keys() {
    let a = CounterKey::new("d", Unit::Second, [("k", "v")]);
    let b = CounterKey::new("d", Unit::Minute, [("k", "v")]);
    assert_ne!(a, b);
    assert_eq!(a, CounterKey::new("d", Unit::Second, [("k", "v")]));
}

#[test]
fn shapes_and_windows_separate_keys() {
    let fixed = CounterKey::new("d", Unit::Minute, [("k", "v")]);
    let space = |period, algorithm| KeySpace { period, algorithm };
    let sliding = CounterKey::new(
        "d",
        space(Period::Unit(Unit::Minute), Algorithm::SlidingWindow),
        [("k", "v")],
    );
    let sixty = CounterKey::new(
        "d",
        space(Period::Seconds(60), Algorithm::FixedWindow),
        [("k", "v")],
    );
    assert_ne!(fixed, sliding);
    assert_ne!(fixed, sixty);
    assert_ne!(sliding, sixty);
    assert_eq!(sliding.parts(), ("d", vec![("k", "v")]));
}

#[test]
fn parts_round_trip() {
    let k = CounterKey::new("d_1", Unit::Hour, [("a", "b_c"), ("e", "")]);
    assert_eq!(k.parts(), ("d_1", vec![("a", "b_c"), ("e", "")]));
}

#[test]
fn debug_does_not_show_values() {
    let k = CounterKey::new("d", Unit::Second, [("email", "a@example.com")]);
    assert!(!format!("{k:?}").contains("example"));
}
