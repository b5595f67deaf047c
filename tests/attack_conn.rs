//! Hostile connections: idle and half-sent ones are closed, the number open
//! is capped on both ports (a newcomer is seated by closing the least useful), streams per connection are capped, running out
//! of file descriptors does not spin, and the admin port refuses what a web
//! page could send it.

mod common;
#[path = "attack_conn/requests.rs"]
mod requests;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const RULES: &str = "
domain: web
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
";

/// Whether the server closed `s` (a read sees end of stream or a reset).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).ok();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    TcpStream::connect(addr).expect("connect")
}

#[tokio::test]
async fn idle_and_half_sent_connections_are_closed() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--grpc-idle-timeout",
            "1s",
            "--admin-idle-timeout",
            "1s",
            "--admin-header-timeout",
            "1s",
        ],
    );
    // A raw TCP connection that never speaks, on each port.
    let mut grpc = connect(s.grpc);
    let mut admin = connect(s.admin);
    // A request whose headers never finish, trickled a byte at a time.
    let mut half = connect(s.admin);
    half.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let mut trickle = true;
    assert!(eventually(Duration::from_secs(10), || {
        if trickle {
            trickle = half.write_all(b"X").is_ok();
        }
        closed_by_server(&mut grpc) && closed_by_server(&mut admin) && closed_by_server(&mut half)
    }));
    // An HTTP/2 client that keeps a request going is not idle; one after the
    // timeout still gets an answer on a fresh connection.
    let mut c = s.client().await;
    assert_eq!(ask(&mut c, "web", &[("k", "v")]).await.overall_code, OK);
    // The two that never spoke went at the handshake timeout's bound.
    let m = s.get("/metrics").1;
    assert!(
        metric(&m, "sluice_bound_hits_total{bound=\"handshake_timeout\"}").unwrap() >= 2.0,
        "{m}"
    );
}

#[tokio::test]
async fn connections_are_capped_and_the_admin_port_keeps_answering() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--grpc-max-connections",
            "8",
            "--admin-max-connections",
            "4",
        ],
    );
    let held: Vec<TcpStream> = (0..20).map(|_| connect(s.grpc)).collect();
    assert!(eventually(Duration::from_secs(5), || {
        metric(
            &s.get("/metrics").1,
            "sluice_bound_hits_total{bound=\"grpc_connection_evicted\"}",
        ) >= Some(12.0)
    }));
    // The evicted close as they are next polled: the cap holds again.
    assert!(eventually(Duration::from_secs(5), || {
        metric(&s.get("/metrics").1, "sluice_grpc_connections") == Some(8.0)
    }));
    // A client past the cap is seated by closing a connection that never
    // spoke, not left in the backlog.
    let c = tonic::transport::Endpoint::from_shared(format!("http://{}", s.grpc))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    let mut client =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(c);
    assert!(
        client
            .should_rate_limit(request("web", vec![descriptor(&[("k", "v")])]))
            .await
            .is_ok()
    );
    drop(held);
    // The admin port has its own cap, so gRPC hoarders cannot take it.
    let admin_held: Vec<TcpStream> = (0..4).map(|_| connect(s.admin)).collect();
    assert!(eventually(Duration::from_secs(5), || {
        std::panic::catch_unwind(|| s.get("/healthz").0 == 200).unwrap_or(false)
    }));
    drop(admin_held);
}

#[tokio::test]
async fn streams_per_connection_are_capped() {
    let s = Sluice::start(&[("web.yaml", RULES)], &["--grpc-max-streams", "7"]);
    let tcp = tokio::net::TcpStream::connect(s.grpc).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut h2 = h2.ready().await.unwrap();
    // The server's SETTINGS arrive with the first exchange.
    let req = http::Request::post(format!("http://{}/grpc.health.v1.Health/Check", s.grpc))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut body) = h2.send_request(req, false).unwrap();
    body.send_data(tonic::codegen::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let _ = resp.await.unwrap();
    h2 = h2.ready().await.unwrap();
    assert_eq!(h2.current_max_send_streams(), 7);
}

/// A client that opens streams as fast as it can and never reads: once
/// sluice cannot write to it, sluice stops reading from it, and closes it
/// when the stall lasts.
#[tokio::test]
async fn a_client_that_never_reads_is_held_back_and_closed() {
    use prost::Message;
    let s = Sluice::start(&[("web.yaml", RULES)], &["--grpc-keepalive-timeout", "1s"]);
    let message = request("web", vec![descriptor(&[("k", "noread")])]).encode_to_vec();
    let mut t = connect(s.grpc);
    t.set_write_timeout(Some(Duration::from_secs(3))).ok();
    let mut out = common::h2raw::preface();
    let mut stream = 1u32;
    let mut blocked = false;
    // Bounded: at most 200,000 streams, or until sluice stops taking bytes.
    while stream < 400_000 {
        for _ in 0..100 {
            common::h2raw::call(&mut out, stream, &s.grpc.to_string(), &message);
            stream += 2;
        }
        if t.write_all(&out).is_err() {
            blocked = true;
            break;
        }
        out.clear();
    }
    assert!(
        blocked,
        "sluice kept reading from a client that reads nothing"
    );
    assert!(eventually(Duration::from_secs(10), || {
        metric(&s.get("/metrics").1, "sluice_grpc_connections") == Some(0.0)
    }));
    // Everyone else is served.
    let mut c = s.client().await;
    assert_eq!(ask(&mut c, "web", &[("k", "v")]).await.overall_code, OK);
}

/// A client that ignores the stream cap is refused a bounded number of times,
/// then told to go away (ENHANCE_YOUR_CALM), not refused forever.
#[tokio::test]
async fn a_client_ignoring_the_stream_cap_gets_a_goaway() {
    use prost::Message;
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &["--grpc-max-streams", "4", "--grpc-max-reset-streams", "50"],
    );
    let message = request("web", vec![descriptor(&[("k", "cap")])]).encode_to_vec();
    let mut t = connect(s.grpc);
    t.set_write_timeout(Some(Duration::from_secs(3))).ok();
    let mut out = common::h2raw::preface();
    for i in 0..2000 {
        common::h2raw::call(&mut out, 1 + 2 * i, &s.grpc.to_string(), &message);
    }
    let _ = t.write_all(&out);
    let (calm, got) = read_until(&mut t, |_, _| false);
    assert!(calm, "no GOAWAY ENHANCE_YOUR_CALM in {got} bytes");
}

/// Reads frames until `done(kind, stream)` says so, the peer closes, or 5 s
/// pass: whether a GOAWAY (type 7) with ENHANCE_YOUR_CALM (0xb) came, and
/// how many bytes did.
fn read_until(t: &mut std::net::TcpStream, done: impl Fn(u8, u32) -> bool) -> (bool, usize) {
    t.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let (mut got, mut at, mut calm) = (Vec::new(), 0, false);
    let mut buf = [0u8; 65536];
    while let Ok(n) = t.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        while let Some(head) = got.get(at..at + 9) {
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, stream) = (
                head[3],
                u32::from_be_bytes([head[5], head[6], head[7], head[8]]),
            );
            let Some(payload) = got.get(at + 9..at + 9 + len) else {
                break;
            };
            calm |= kind == 7 && payload.get(4..8) == Some(&[0, 0, 0, 0xb]);
            at += 9 + len;
            if calm || done(kind, stream) {
                return (calm, got.len());
            }
        }
    }
    (calm, got.len())
}

/// Forty calls, each reset (RST_STREAM CANCEL) before sluice could accept
/// it, in one write: as a sluice starved of CPU past Envoy's timeout reads
/// Envoy's requests and their resets together, or as a rapid-reset attack
/// sends them. Past `--grpc-max-pending-resets` (here 20, h2's default) the
/// connection is told to go away; under the default (1024) it lives on and
/// answers the next call.
#[tokio::test]
async fn resets_before_accept_past_the_bound_get_a_goaway() {
    use prost::Message;
    for (args, goaway) in [
        (&["--grpc-max-pending-resets", "20"][..], true),
        (&[][..], false),
    ] {
        let s = Sluice::start(&[("web.yaml", RULES)], args);
        let message = request("web", vec![descriptor(&[("k", "reset")])]).encode_to_vec();
        let mut t = connect(s.grpc);
        let mut out = common::h2raw::preface();
        for i in 0..40 {
            common::h2raw::call(&mut out, 1 + 2 * i, &s.grpc.to_string(), &message);
            common::h2raw::frame(&mut out, 0x3, 0, 1 + 2 * i, &8u32.to_be_bytes());
        }
        let last = 81;
        common::h2raw::call(&mut out, last, &s.grpc.to_string(), &message);
        t.write_all(&out).expect("write");
        // Until the last call's answer (HEADERS, type 1) or a GOAWAY.
        let (calm, got) = read_until(&mut t, |kind, stream| kind == 1 && stream == last);
        assert_eq!(
            calm, goaway,
            "{args:?}: GOAWAY ENHANCE_YOUR_CALM in {got} bytes"
        );
        if goaway {
            assert!(eventually(Duration::from_secs(5), || s
                .logs_contain("pending-accept streams reached limit")));
        }
    }
}

/// Out of file descriptors, accepting pauses instead of spinning, and
/// resumes once descriptors are free.
#[tokio::test]
async fn running_out_of_descriptors_backs_off() {
    let dir = config_dir(&[("web.yaml", RULES)]);
    // A low descriptor limit for this sluice alone.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 48 && exec {} serve --config {} --grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --log-format json --no-watch",
            sluice_bin(),
            dir.path().display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let listening = loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("started");
        if line.contains("sluice listening") {
            break line;
        }
    };
    let v: serde_json::Value = serde_json::from_str(&listening).unwrap();
    let grpc: std::net::SocketAddr = v["fields"]["grpc_addr"].as_str().unwrap().parse().unwrap();
    let admin: std::net::SocketAddr = v["fields"]["admin_addr"].as_str().unwrap().parse().unwrap();
    let held: Vec<TcpStream> = (0..80)
        .filter_map(|_| TcpStream::connect(grpc).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let warnings = std::iter::from_fn(|| rx.try_recv().ok())
        .filter(|l| l.contains("accept failed"))
        .count();
    drop(held);
    // A spinning accept loop fails millions of times and logs each; backed
    // off, it fails a handful of times a second and logs once per streak.
    let m = eventually(Duration::from_secs(10), || {
        std::panic::catch_unwind(|| http(admin, "GET", "/metrics", "").0 == 200).unwrap_or(false)
    });
    assert!(m, "the admin port answers once descriptors are free");
    let text = http(admin, "GET", "/metrics", "").1;
    let errors = metric(&text, "sluice_accept_errors_total").unwrap();
    assert!(errors >= 1.0, "the descriptor limit was reached");
    assert!(errors < 200.0, "{errors} failed accepts: a spin");
    assert!(warnings <= 3, "{warnings} warnings");
    let _ = child.kill();
    let _ = child.wait();
}
