//! Hostile requests once connected: what a web page could send to the admin port, malformed protobuf, and a client that closes the pipe.

use super::*;

#[tokio::test]
async fn the_admin_port_refuses_what_a_web_page_could_send() {
    let s = Sluice::start(&[("web.yaml", RULES)], &[]);
    let send = |head: &str, body: &str| -> u16 {
        let mut t = connect(s.admin);
        t.set_read_timeout(Some(Duration::from_secs(5))).ok();
        write!(
            t,
            "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        let _ = t.read_to_string(&mut out);
        out.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    };
    // DNS rebinding: the page's own name in Host.
    assert_eq!(
        send(
            "GET /readyz HTTP/1.1\r\nHost: attacker.example:8080\r\n",
            ""
        ),
        403
    );
    // A cross-site form (text/plain needs no preflight).
    let json = r#"{"domain":"web","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    assert_eq!(
        send(
            "POST /json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n",
            json
        ),
        403
    );
    assert_eq!(
        send(
            "POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://attacker.example\r\n",
            ""
        ),
        403
    );
    // Operators' tools still work.
    assert_eq!(
        send(
            "POST /json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
            json
        ),
        200
    );
    assert_eq!(
        send("POST /reload HTTP/1.1\r\nHost: localhost:9\r\n", ""),
        200
    );
    assert_eq!(s.get("/readyz").0, 200);
}

/// Bytes that are not a RateLimitRequest: INVALID_ARGUMENT, counted invalid.
#[tokio::test]
async fn malformed_protobuf_is_an_invalid_argument() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Raw {
        /// Field 1 of RateLimitRequest is the domain, a string.
        #[prost(bytes = "vec", tag = "1")]
        domain: Vec<u8>,
    }
    let s = Sluice::start(&[("web.yaml", RULES)], &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let codec: tonic_prost::ProstCodec<Raw, Raw> = tonic_prost::ProstCodec::default();
    let e = grpc
        .unary(
            tonic::Request::new(Raw {
                domain: vec![0xff, 0xfe, 0xfd],
            }),
            path,
            codec,
        )
        .await
        .expect_err("invalid UTF-8 is refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let m = s.get("/metrics").1;
    assert_eq!(
        metric(&m, "sluice_requests_total{code=\"invalid\"}"),
        Some(1.0)
    );
}

/// `sluice bench | head -1`: the reader going away is not a crash.
#[tokio::test]
async fn bench_survives_a_closed_pipe() {
    let s = Sluice::start(&[("web.yaml", RULES)], &[]);
    let mut child = Command::new(sluice_bin())
        .args([
            "bench",
            "--target",
            &s.grpc.to_string(),
            "--domain",
            "web",
            "--descriptor",
            "k=v",
            "--requests",
            "10",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?} {err}", out.status);
}
