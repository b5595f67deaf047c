use std::net::IpAddr;

use super::*;

fn peer(n: u8) -> Peer {
    Peer::V4([127, 0, 0, n])
}

struct Conn {
    activity: Arc<Activity>,
    close: CancellationToken,
    _held: Held,
}

fn connect(seats: &Arc<Seats>, p: Peer) -> (Conn, Option<Evicted>) {
    let close = CancellationToken::new();
    let (held, activity, evicted) = seats.seat(p, close.clone());
    (
        Conn {
            activity,
            close,
            _held: held,
        },
        evicted,
    )
}

#[tokio::test(start_paused = true)]
async fn a_full_cap_seats_a_newcomer_by_closing_the_hoarders_connection() {
    let seats = Seats::new(SeatBounds {
        total: 4,
        per_peer: 100,
    });
    let hoard: Vec<Conn> = (0..4).map(|_| connect(&seats, peer(2)).0).collect();
    let (honest, evicted) = connect(&seats, peer(1));
    let e = evicted.expect("someone made room");
    assert_eq!(e.peer, peer(2));
    assert!(!e.peer_full);
    assert_eq!(hoard.iter().filter(|c| c.close.is_cancelled()).count(), 1);
    assert!(!honest.close.is_cancelled());
    assert_eq!(seats.open(), 4);
    // The hoarder keeps coming back: it only ever loses its own.
    let mut again = Vec::new();
    for _ in 0..20 {
        let (c, e) = connect(&seats, peer(2));
        assert_eq!(e.map(|e| e.peer), Some(peer(2)));
        again.push(c);
    }
    assert!(
        !honest.close.is_cancelled(),
        "the honest peer keeps its seat"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_goes_before_an_established_one() {
    let seats = Seats::new(SeatBounds {
        total: 3,
        per_peer: 100,
    });
    let a = connect(&seats, peer(2)).0;
    let b = connect(&seats, peer(2)).0;
    a.activity.establish();
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    b.activity.establish();
    let silent = connect(&seats, peer(2)).0;
    let _honest = connect(&seats, peer(1)).0;
    assert!(silent.close.is_cancelled(), "never spoke: least useful");
    assert!(!a.close.is_cancelled() && !b.close.is_cancelled());
    // Among established ones the quietest goes first.
    let _c = connect(&seats, peer(3)).0;
    assert!(a.close.is_cancelled(), "quiet for longest");
    assert!(!b.close.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_busy_connection_goes_after_idle_ones() {
    let seats = Seats::new(SeatBounds {
        total: 2,
        per_peer: 100,
    });
    let a = connect(&seats, peer(2)).0;
    let b = connect(&seats, peer(2)).0;
    a.activity.establish();
    b.activity.establish();
    let _busy = a.activity.start();
    connect(&seats, peer(1));
    assert!(!a.close.is_cancelled());
    assert!(b.close.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_peer_at_its_share_replaces_its_own_connections() {
    let seats = Seats::new(SeatBounds {
        total: 100,
        per_peer: 2,
    });
    let other = connect(&seats, peer(1)).0;
    let mine: Vec<Conn> = (0..2).map(|_| connect(&seats, peer(2)).0).collect();
    let (_third, e) = connect(&seats, peer(2));
    let e = e.expect("its own oldest goes");
    assert!(e.peer_full);
    assert_eq!(e.peer, peer(2));
    assert_eq!(mine.iter().filter(|c| c.close.is_cancelled()).count(), 1);
    assert!(!other.close.is_cancelled());
}

#[test]
fn ipv6_peers_are_counted_by_their_64() {
    let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(Peer::of(a), Peer::of(b));
    assert_ne!(Peer::of(a), Peer::of(c));
    let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
    assert_eq!(Peer::of(mapped), peer(2));
    assert_eq!(peer(2).masked(), "127.0.x.x");
}

#[tokio::test(start_paused = true)]
async fn a_peers_connections_share_one_load() {
    let seats = Seats::new(SeatBounds {
        total: 10,
        per_peer: 10,
    });
    let a = connect(&seats, peer(2)).0;
    let b = connect(&seats, peer(2)).0;
    let other = connect(&seats, peer(3)).0;
    let _x = a.activity.start();
    let _y = b.activity.start();
    assert_eq!(a.activity.peer_in_flight(), 2);
    assert_eq!(b.activity.peer_in_flight(), 2);
    assert_eq!(other.activity.peer_in_flight(), 0);
    drop((a, b, other, _x, _y));
    assert_eq!(seats.loads(), 0, "a peer's load goes with its last seat");
}
