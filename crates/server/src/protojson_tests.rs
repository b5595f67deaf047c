use super::*;

#[test]
fn parses_camel_and_snake_case() {
    let r = parse_request(
        br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],
               "limit":{"requestsPerUnit":"5","unit":"minute"},"hitsAddend":"0"}]}"#,
    )
    .unwrap();
    assert_eq!(r.hits_addend, 2);
    let d = &r.descriptors[0];
    assert_eq!(
        d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit)),
        Some((5, 2))
    );
    assert_eq!(d.hits_addend.as_ref().map(|h| h.value), Some(0));
}

#[test]
fn rejects_unknown_fields_and_bad_json() {
    assert!(
        parse_request(br#"{"domian":"d"}"#)
            .unwrap_err()
            .contains("domian")
    );
    assert!(parse_request(b"}").is_err());
    assert!(parse_request(b"").is_err());
}
