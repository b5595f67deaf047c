use super::*;

#[test]
fn keeps_positions_of_keys_and_values() {
    let node = parse("domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n").unwrap();
    let Value::Map(entries) = &node.value else {
        panic!("not a map: {node:?}")
    };
    assert_eq!(entries[0].0.value, Value::Str("domain".into()));
    let Value::Seq(items) = &entries[1].1.value else {
        panic!("not a seq")
    };
    let Value::Map(d) = &items[0].value else {
        panic!("not a map")
    };
    assert_eq!(d[1].1.value, Value::Float(1.5));
    assert_eq!(position(&d[1].0.referenced), Some((4, 5)));
}

#[test]
fn non_string_keys_survive() {
    let node = parse("0.25: x\n").unwrap();
    let Value::Map(entries) = &node.value else {
        panic!()
    };
    assert_eq!(entries[0].0.value.to_string(), "0.25");
}

#[test]
fn syntax_error_has_position() {
    let err = parse("'''\n").unwrap_err();
    assert!(!err.message.is_empty());
}
