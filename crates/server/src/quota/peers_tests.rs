use super::*;

#[test]
fn each_peer_has_its_own_share_given_back_on_drop() {
    let peers = Peers::new(2, 1);
    let a = Peer::V4([127, 0, 0, 2]);
    let b = Peer::V4([127, 0, 0, 3]);
    let s1 = peers.stream(a).expect("first");
    let _s2 = peers.stream(a).expect("second");
    assert!(peers.stream(a).is_none(), "a holds its share");
    assert!(peers.stream(b).is_some(), "b is not held back by a");
    let _k = peers.bucket(a).expect("a bucket");
    assert!(peers.bucket(a).is_none());
    drop(s1);
    assert!(peers.stream(a).is_some(), "given back");
}
