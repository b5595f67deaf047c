use super::*;

#[tokio::test(start_paused = true)]
async fn a_fresh_fleet_is_shared_with_the_readers_own_demand() {
    let f = Fleets::default();
    let fresh = Duration::from_millis(500);
    f.put(
        "t",
        &[MemberDemand {
            member: 1,
            demand: 4.0,
        }],
        fresh,
    );
    let got = f.get("t", fresh, 2, 1.0).unwrap();
    assert_eq!(got.len(), 2);
    let own = f.get("t", fresh, 1, 9.0).unwrap();
    assert_eq!(
        own,
        vec![MemberDemand {
            member: 1,
            demand: 9.0
        }]
    );
    tokio::time::advance(Duration::from_millis(600)).await;
    assert!(f.get("t", fresh, 2, 1.0).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_split_is_made_once_per_read_and_only_for_what_was_read() {
    let f = Fleets::default();
    let fresh = Duration::from_millis(500);
    let m = |member, demand| MemberDemand { member, demand };
    f.put("t", &[m(1, 1.0), m(2, 30.0)], fresh);
    let whole = split(10.0, &[m(1, 1.0), m(2, 30.0)]);
    assert_eq!(f.share("t", fresh, 1, 1.0, 10.0), Some((whole[0], 2)));
    assert_eq!(f.share("t", fresh, 2, 30.0, 10.0), Some((whole[1], 2)));
    // Another rate on the same table: split again, not the memo.
    let other = split(4.0, &[m(1, 1.0), m(2, 30.0)]);
    assert_eq!(f.share("t", fresh, 2, 30.0, 4.0), Some((other[1], 2)));
    // A demand as Redis gives it back (three decimals) is the same one.
    assert_eq!(f.share("t", fresh, 1, 1.0004, 10.0), Some((whole[0], 2)));
    // A demand moved since the read, or a member not in it: no share.
    assert_eq!(f.share("t", fresh, 1, 2.0, 10.0), None);
    assert_eq!(f.share("t", fresh, 3, 1.0, 10.0), None);
    // A new read drops the old split.
    f.put("t", &[m(1, 1.0), m(2, 1.0)], fresh);
    assert_eq!(f.share("t", fresh, 2, 1.0, 10.0), Some((5.0, 2)));
    tokio::time::advance(Duration::from_millis(600)).await;
    assert_eq!(f.share("t", fresh, 2, 1.0, 10.0), None);
}
