use super::*;

#[test]
fn grpc_timeouts_parse_as_the_spec_writes_them() {
    assert_eq!(parse_timeout("19m"), Some(Duration::from_millis(19)));
    assert_eq!(parse_timeout("1S"), Some(Duration::from_secs(1)));
    assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_timeout("500u"), Some(Duration::from_micros(500)));
    for bad in ["", "m", "123456789m", "1x", "-1m", "1.5S"] {
        assert_eq!(parse_timeout(bad), None, "{bad}");
    }
}

#[test]
fn past_the_bound_only_connections_under_their_share_get_in() {
    let p = Pending::new(4);
    let flood = Activity::new();
    let honest = Activity::new();
    let held: Vec<Slot<'_>> = (0..4).filter_map(|_| p.enter(Some(&flood), || 2)).collect();
    assert_eq!(held.len(), 4);
    assert!(
        p.enter(Some(&flood), || 2).is_none(),
        "the flood holds its share"
    );
    let h = p.enter(Some(&honest), || 2);
    assert!(
        h.is_some(),
        "an honest connection under its share is not shed"
    );
    assert!(p.enter(None, || 2).is_none(), "no connection: no share");
    drop(held);
    drop(h);
    assert!(p.enter(Some(&flood), || 2).is_some(), "places come back");
}
