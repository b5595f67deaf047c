//! Hostile volume: connections, half-sent bodies, quota streams and floods
//! from one peer (a loopback alias, 127.0.0.2) never lock out another
//! (127.0.0.1), and overload never loosens counting.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

const RULES: &str = "
domain: web
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// A TCP connection to `to` from the attacker's address.
async fn from_attacker(to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4()?;
    s.bind(SocketAddr::from((ATTACKER, 0)))?;
    s.connect(to).await
}

/// A gRPC client from `ip` that gives up after `within`.
fn client_from(ip: [u8; 4], to: SocketAddr, within: Duration) -> RateLimitServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{to}"))
        .unwrap()
        .local_address(Some(IpAddr::from(ip)))
        .connect_timeout(within)
        .timeout(within)
        .connect_lazy();
    RateLimitServiceClient::new(channel)
}

/// 4,000 silent connections from one peer (the gRPC cap is 64 here, the
/// handshake timeout long): a fresh client from another peer is still
/// answered at once, on both ports, and the evictions are counted.
#[tokio::test]
async fn silent_connections_from_one_peer_never_lock_out_another() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--grpc-max-connections",
            "64",
            "--grpc-max-connections-per-peer",
            "10000",
            "--admin-max-connections",
            "16",
            "--admin-max-connections-per-peer",
            "10000",
            "--handshake-timeout",
            "120s",
        ],
    );
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(from_attacker(s.grpc).await.expect("attacker connects"));
    }
    for _ in 0..100 {
        held.push(from_attacker(s.admin).await.expect("attacker connects"));
    }
    // Every honest client is answered within 2 s, while the attacker holds on.
    for i in 0..10 {
        let mut c = client_from([127, 0, 0, 1], s.grpc, Duration::from_secs(2));
        let r = c
            .should_rate_limit(request("web", vec![descriptor(&[("k", "v")])]))
            .await;
        assert!(r.is_ok(), "honest client {i}: {r:?}");
        assert_eq!(s.get("/healthz").0, 200);
        held.push(from_attacker(s.grpc).await.expect("attacker connects"));
    }
    assert!(bound(&s, "grpc_connection_evicted") >= 300.0);
    assert!(bound(&s, "admin_connection_evicted") >= 80.0);
    // The cap, plus those closed to make room and not yet gone (the hard
    // bound on descriptors: the cap and a sixteenth, at least 16 more).
    assert!(metric(&s.get("/metrics").1, "sluice_grpc_connections").unwrap() <= 80.0);
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("closed that peer's least useful connection")));
}

/// A peer at its share of connections replaces its own; a peer that never
/// speaks is closed at the handshake timeout.
#[tokio::test]
async fn a_peer_over_its_share_loses_only_its_own_and_silence_is_closed() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--grpc-max-connections-per-peer",
            "5",
            "--handshake-timeout",
            "1s",
        ],
    );
    let mut honest = client_from([127, 0, 0, 1], s.grpc, Duration::from_secs(5));
    assert!(
        honest
            .should_rate_limit(request("web", vec![descriptor(&[("k", "v")])]))
            .await
            .is_ok()
    );
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(from_attacker(s.grpc).await.expect("connects"));
    }
    assert!(eventually(Duration::from_secs(5), || {
        bound(&s, "grpc_connection_evicted") >= 15.0
    }));
    // The attacker's remaining five never spoke: gone at the timeout.
    assert!(eventually(Duration::from_secs(10), || {
        bound(&s, "handshake_timeout") >= 5.0
    }));
    // The honest connection, established, outlives both.
    assert!(
        honest
            .should_rate_limit(request("web", vec![descriptor(&[("k", "v")])]))
            .await
            .is_ok()
    );
    assert!(eventually(Duration::from_secs(5), || {
        metric(&s.get("/metrics").1, "sluice_grpc_connections") == Some(1.0)
    }));
}

/// Raw HTTP/2: `n` ShouldRateLimit streams, each sending a `size`-byte
/// message but its last byte, on one connection from the attacker.
async fn half_sent(to: SocketAddr, n: u32, size: usize) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut t = from_attacker(to).await.expect("connects");
    t.write_all(&common::h2raw::preface())
        .await
        .expect("preface");
    // Wait for the server's connection WINDOW_UPDATE (type 8, stream 0):
    // until then the connection window is the protocol's 65,535 bytes.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !window_opened(&seen) {
        let n = tokio::time::timeout(Duration::from_secs(5), t.read(&mut buf))
            .await
            .expect("server frames")
            .expect("read");
        assert!(n > 0, "closed before its window update");
        seen.extend_from_slice(&buf[..n]);
    }
    let mut out = Vec::new();
    common::h2raw::frame(&mut out, 0x4, 0x1, 0, &[]); // SETTINGS ACK
    let message = vec![0u8; size];
    for i in 0..n {
        let mut one = Vec::new();
        common::h2raw::call(&mut one, 1 + 2 * i, &to.to_string(), &message);
        // HEADERS as built; DATA without END_STREAM and one byte short, cut
        // into frames of at most 16 KiB (the default frame size).
        let headers_len =
            9 + (usize::from(one[0]) << 16 | usize::from(one[1]) << 8 | usize::from(one[2]));
        out.extend_from_slice(&one[..headers_len]);
        let body = &one[headers_len + 9..one.len() - 1];
        for chunk in body.chunks(16_384) {
            common::h2raw::frame(&mut out, 0x0, 0, 1 + 2 * i, chunk);
        }
    }
    t.write_all(&out).await.expect("sent");
    t
}

/// Whether `frames` (from the server) hold a WINDOW_UPDATE on stream 0.
fn window_opened(mut frames: &[u8]) -> bool {
    while frames.len() >= 9 {
        let len =
            usize::from(frames[0]) << 16 | usize::from(frames[1]) << 8 | usize::from(frames[2]);
        if frames[3] == 0x8 && frames[5..9] == [0, 0, 0, 0] {
            return true;
        }
        let Some(rest) = frames.get(9 + len..) else {
            return false;
        };
        frames = rest;
    }
    false
}

/// Whether the server has closed `t` (read end of stream or a reset).
async fn closed(t: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, t.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn half_sent_bodies_are_bounded_timed_out_and_their_connection_closed() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--max-connection-body-bytes",
            "200000",
            "--body-timeout",
            "2s",
            "--grpc-idle-timeout",
            "3s",
        ],
    );
    // Eight streams of 65,000 bytes would hold 520 KB; 200 KB is the bound.
    let mut t = half_sent(s.grpc, 8, 65_000).await;
    let refused = eventually(Duration::from_secs(5), || bound(&s, "body_bytes") >= 4.0);
    assert!(refused, "{}", s.get("/metrics").1);
    // The rest never finish: refused at the body timeout...
    assert!(eventually(Duration::from_secs(10), || bound(
        &s,
        "body_timeout"
    ) >= 1.0));
    // ...and a connection holding only unfinished bodies is idle: closed.
    assert!(closed(&mut t, Duration::from_secs(15)).await, "still open");
    // Meanwhile everyone else is answered.
    let mut c = client_from([127, 0, 0, 1], s.grpc, Duration::from_secs(2));
    assert!(
        c.should_rate_limit(request("web", vec![descriptor(&[("k", "v")])]))
            .await
            .is_ok()
    );
}

/// With the body timeout out of reach, the idle timeout alone closes a
/// connection whose only requests are half-sent.
#[tokio::test]
async fn a_connection_of_unfinished_bodies_is_idle() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &["--body-timeout", "300s", "--grpc-idle-timeout", "2s"],
    );
    let mut t = half_sent(s.grpc, 3, 1000).await;
    assert!(closed(&mut t, Duration::from_secs(15)).await, "still open");
    assert!(metric(&s.get("/metrics").1, "sluice_connections_idle_closed_total").unwrap() >= 1.0);
}
