use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ticket() -> Ticket {
    let permit = Arc::new(tokio::sync::Semaphore::new(1))
        .try_acquire_owned()
        .expect("a permit");
    let seats = super::super::Seats::new(super::super::SeatBounds {
        total: 8,
        per_peer: 8,
    });
    super::super::seat(
        &seats,
        super::super::Peer::Local,
        permit,
        crate::metrics::Listener::Grpc,
        &Arc::new(Metrics::default()),
    )
}

fn limits(idle: u64) -> ConnBounds {
    ConnBounds {
        max_connections: 1,
        max_per_peer: 1,
        handshake_timeout: Duration::from_secs(idle),
        max_in_flight_per_peer: 0,
        idle_timeout: Duration::from_secs(idle),
        write_stall: Duration::from_secs(5),
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_never_reads_is_not_read_from_and_is_closed() {
    let (mut client, server) = tokio::io::duplex(16);
    let mut g = Guarded::new(server, ticket(), limits(600), IdleBy::Reads);
    // Fill the peer's buffer: the next write blocks.
    g.write_all(&[1u8; 16]).await.expect("fits");
    let write = tokio::time::timeout(Duration::from_secs(1), g.write_all(&[2u8; 16])).await;
    assert!(write.is_err(), "blocked");
    // The peer sends, but nothing is read while writes are blocked...
    client.write_all(b"more").await.expect("client writes");
    let mut buf = [0u8; 4];
    let started = Instant::now();
    let e = g.read(&mut buf).await.expect_err("closed");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    // ...and the connection is given up once the stall lasts.
    assert!(started.elapsed() <= Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_reader_held_back_resumes_when_the_peer_reads() {
    let (mut client, server) = tokio::io::duplex(16);
    let mut g = Guarded::new(server, ticket(), limits(600), IdleBy::Reads);
    g.write_all(&[1u8; 16]).await.expect("fits");
    let blocked = tokio::time::timeout(Duration::from_millis(10), g.write_all(&[2u8; 8])).await;
    assert!(blocked.is_err());
    client.write_all(b"hi").await.expect("client writes");
    let mut drained = [0u8; 16];
    client.read_exact(&mut drained).await.expect("peer reads");
    // The blocked write goes through, and reading resumes.
    g.write_all(&[2u8; 8]).await.expect("unblocked");
    let mut buf = [0u8; 2];
    g.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"hi");
}

#[tokio::test(start_paused = true)]
async fn closes_after_the_idle_timeout_unless_a_request_is_in_flight() {
    let (client, server) = tokio::io::duplex(64);
    let mut g = Guarded::new(server, ticket(), limits(10), IdleBy::Requests);
    g.activity.establish();
    let busy = g.activity.start();
    let mut buf = [0u8; 8];
    // A request in flight for a minute: not idle.
    let read = tokio::time::timeout(Duration::from_secs(60), g.read(&mut buf)).await;
    assert!(read.is_err(), "still open while busy");
    drop(busy);
    let started = Instant::now();
    let e = g.read(&mut buf).await.expect_err("idle");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    drop(client);
}

#[tokio::test(start_paused = true)]
async fn reads_keep_an_admin_connection_open() {
    let (mut client, server) = tokio::io::duplex(64);
    let mut g = Guarded::new(server, ticket(), limits(10), IdleBy::Reads);
    let mut buf = [0u8; 8];
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(8)).await;
        client.write_all(b"x").await.expect("write");
        assert_eq!(g.read(&mut buf).await.expect("read"), 1);
    }
    let started = Instant::now();
    assert!(g.read(&mut buf).await.is_err());
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_grpc_connection_without_a_preface_is_closed_at_the_handshake_timeout() {
    let (mut client, server) = tokio::io::duplex(64);
    let mut l = limits(300);
    l.handshake_timeout = Duration::from_secs(2);
    let mut g = Guarded::new(server, ticket(), l, IdleBy::Requests);
    // Fewer bytes than the HTTP/2 preface: not established.
    client.write_all(b"PRI * HTTP/2.0").await.expect("write");
    let mut buf = [0u8; 64];
    assert_eq!(g.read(&mut buf).await.expect("read"), 14);
    let started = Instant::now();
    let e = g.read(&mut buf).await.expect_err("closed");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_spoken_connection_lives_past_the_handshake_timeout() {
    let (mut client, server) = tokio::io::duplex(64);
    let mut l = limits(300);
    l.handshake_timeout = Duration::from_secs(2);
    let mut g = Guarded::new(server, ticket(), l, IdleBy::Requests);
    client.write_all(&[0u8; 24]).await.expect("write");
    let mut buf = [0u8; 64];
    assert_eq!(g.read(&mut buf).await.expect("read"), 24);
    let read = tokio::time::timeout(Duration::from_secs(60), g.read(&mut buf)).await;
    assert!(read.is_err(), "open until its idle timeout");
}

#[tokio::test(start_paused = true)]
async fn an_evicted_connection_closes_at_once() {
    let (_client, server) = tokio::io::duplex(64);
    let t = ticket();
    let close = t.close.clone();
    let mut g = Guarded::new(server, t, limits(300), IdleBy::Requests);
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_millis(10), g.read(&mut buf)).await;
    assert!(read.is_err());
    close.cancel();
    let e = g.read(&mut buf).await.expect_err("closed");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
}

/// An established connection whose peer may have one request in flight.
fn one_request_share() -> (
    tokio::io::DuplexStream,
    Guarded<tokio::io::DuplexStream>,
    Arc<Activity>,
) {
    let (client, server) = tokio::io::duplex(64);
    let mut l = limits(300);
    l.max_in_flight_per_peer = 1;
    let t = ticket();
    let activity = t.activity.clone();
    let g = Guarded::new(server, t, l, IdleBy::Requests);
    activity.establish();
    (client, g, activity)
}

#[tokio::test(start_paused = true)]
async fn a_peer_over_its_share_is_not_read_until_a_request_ends() {
    let (mut client, mut g, activity) = one_request_share();
    let busy = activity.start();
    client.write_all(b"more").await.expect("client writes");
    let mut buf = [0u8; 4];
    let read = tokio::time::timeout(Duration::from_secs(1), g.read(&mut buf)).await;
    assert!(read.is_err(), "read while the peer is at its share");
    drop(busy);
    assert_eq!(
        g.read(&mut buf).await.expect("read"),
        4,
        "read once one ends"
    );
}

/// A request counted against the peer's share whose body has not all
/// arrived can only finish if its connection is read: pausing that
/// connection deadlocked until the body timeout (seen under CPU load with a
/// thousand concurrent requests on one connection).
#[tokio::test(start_paused = true)]
async fn a_connection_with_a_body_still_arriving_is_read_at_the_share() {
    let (mut client, mut g, activity) = one_request_share();
    let _busy = activity.start();
    activity.body_started();
    client.write_all(b"body").await.expect("client writes");
    let mut buf = [0u8; 4];
    let read = tokio::time::timeout(Duration::from_secs(1), g.read(&mut buf)).await;
    assert_eq!(read.ok().and_then(Result::ok), Some(4), "the body is read");
    activity.body_done();
    client.write_all(b"next").await.expect("client writes");
    let read = tokio::time::timeout(Duration::from_secs(1), g.read(&mut buf)).await;
    assert!(read.is_err(), "paused again once no body is arriving");
}
