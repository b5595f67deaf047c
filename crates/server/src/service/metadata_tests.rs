use super::*;

fn st(pairs: &[(&str, Value)]) -> Struct {
    Struct {
        fields: pairs
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect(),
    }
}

#[test]
fn first_value_wins_and_maps_merge_deeply() {
    let a = st(&[
        ("name", string("a")),
        ("svc", object(st(&[("x", string("1"))]))),
    ]);
    let b = st(&[
        ("name", string("b")),
        ("svc", object(st(&[("y", string("2"))]))),
    ]);
    let mut m = Struct::default();
    merge(&mut m, &a);
    merge(&mut m, &b);
    assert_eq!(m.fields["name"], string("a"));
    let Some(Kind::StructValue(svc)) = &m.fields["svc"].kind else {
        panic!()
    };
    assert_eq!(svc.fields.len(), 2);
}
