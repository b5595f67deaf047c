use super::*;

fn update(member: u64, demand: Option<f64>, ttl_ms: u64) -> DemandUpdate {
    DemandUpdate {
        table: "t".into(),
        member,
        demand,
        ttl: Duration::from_millis(ttl_ms),
        on_failure: None,
    }
}

#[test]
fn members_see_each_other_and_leave() {
    let t = DemandTables::new(10);
    t.update(&update(1, Some(5.0), 60_000)).unwrap();
    let got = t.update(&update(2, Some(UNKNOWN), 60_000)).unwrap();
    assert_eq!(got.len(), 2);
    let got = t.update(&update(2, None, 60_000)).unwrap();
    assert_eq!(
        got,
        vec![MemberDemand {
            member: 1,
            demand: 5.0
        }]
    );
    t.update(&update(1, None, 60_000)).unwrap();
    assert!(t.is_empty());
}

#[test]
fn entries_expire() {
    let t = DemandTables::new(10);
    t.update(&update(1, Some(5.0), 1)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let got = t.update(&update(2, Some(1.0), 60_000)).unwrap();
    assert_eq!(got.len(), 1);
}

#[test]
fn tables_are_bounded() {
    let t = DemandTables::new(2);
    for name in ["a", "b"] {
        let mut u = update(1, Some(1.0), 60_000);
        u.table = name.into();
        t.update(&u).unwrap();
    }
    let mut u = update(1, Some(1.0), 60_000);
    u.table = "c".into();
    assert!(matches!(t.update(&u), Err(StoreError::Rejected(_))));
}

#[test]
fn garbage_replies_are_the_stores_fault() {
    assert!(decode(&["1".into(), "x".into()]).is_err());
    assert!(decode(&["1".into()]).is_err());
    assert_eq!(decode(&["7".into(), "2.5".into()]).unwrap()[0].demand, 2.5);
}
