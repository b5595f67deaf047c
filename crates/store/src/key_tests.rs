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

/// A key is its length-prefixed parts whether it was built on the stack
/// (short) or on the heap: the same bytes on either side of the line.
#[test]
fn keys_are_the_same_bytes_short_or_long() {
    for len in [0, 1, 200, 220, 221, 222, 223, 224, 230, 255, 256, 300, 5000] {
        let value = "v".repeat(len);
        let key = CounterKey::new("dom", Unit::Second, [("k", value.as_str())]);
        let mut want = Vec::new();
        want.extend_from_slice(&3u32.to_be_bytes());
        want.extend_from_slice(b"dom");
        want.push(Unit::Second.proto() as u8);
        for part in ["k".as_bytes(), value.as_bytes()] {
            want.extend_from_slice(&(part.len() as u32).to_be_bytes());
            want.extend_from_slice(part);
        }
        assert_eq!(key.as_bytes(), &want[..], "value of {len} bytes");
        assert_eq!(key.parts(), ("dom", vec![("k", value.as_str())]));
    }
}
