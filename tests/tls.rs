//! TLS and mutual TLS on the gRPC listener, with Envoy as the client: Envoy
//! with a certificate from the client CA is served; one without is refused
//! (and, failing open, passes unchecked); a rotated server certificate is
//! picked up without a restart.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::stack::{mtls_envoy, start_upstream};
use common::{Sluice, certificates, eventually, sh};

const RULES: &str = "
domain: tls
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
";

/// Status and whether Envoy added rate-limit headers (it asked sluice).
fn get(port: u16) -> Option<(u16, bool)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let r = agent.get(format!("http://127.0.0.1:{port}/")).call().ok()?;
    Some((
        r.status().as_u16(),
        r.headers().contains_key("x-ratelimit-limit"),
    ))
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn served_subject(dir: &Path, port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -CAfile ca.pem -cert client.pem -key client.key -alpn h2 </dev/null 2>/dev/null | openssl x509 -noout -subject"
        ))
        .current_dir(dir)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn mutual_tls_serves_envoy_refuses_strangers_and_rotates_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    certificates(d);
    let s = Sluice::start(
        &[("tls.yaml", RULES)],
        &[
            "--grpc-tls-cert",
            &d.join("server.pem").display().to_string(),
            "--grpc-tls-key",
            &d.join("server.key").display().to_string(),
            "--grpc-tls-client-ca",
            &d.join("ca.pem").display().to_string(),
        ],
    );
    let (upstream, upstream_port) = start_upstream();
    let _upstream = Kill(upstream);

    // Envoy with a client certificate from the CA: counted and limited.
    let (trusted, port) = mtls_envoy(d, "trusted", "tls", s.grpc.port(), upstream_port, "client");
    let _trusted = Kill(trusted);
    assert!(
        eventually(Duration::from_secs(30), || get(port)
            .is_some_and(|(_, asked)| asked)),
        "Envoy never got an answer over mutual TLS: {}",
        std::fs::read_to_string(d.join("trusted.log")).unwrap_or_default()
    );
    // The first answered request spent 1 of 2.
    assert_eq!(get(port), Some((200, true)));
    assert_eq!(get(port).map(|r| r.0), Some(429));

    // A stranger's certificate: the handshake fails, so Envoy fails open and
    // sluice never counts it.
    let (stranger, port) = mtls_envoy(
        d,
        "stranger",
        "tls",
        s.grpc.port(),
        upstream_port,
        "stranger",
    );
    let _stranger = Kill(stranger);
    assert!(eventually(Duration::from_secs(30), || get(port).is_some()));
    for _ in 0..3 {
        assert_eq!(get(port), Some((200, false)), "a stranger was served");
    }

    a_rotated_certificate_is_served(d, &s);
}

/// Rotation: new server certificate files are used for new connections.
fn a_rotated_certificate_is_served(d: &Path, s: &Sluice) {
    // Rotation: new server certificate files are used for new connections.
    assert!(served_subject(d, s.grpc.port()).contains("server-1"));
    sh(
        d,
        "openssl req -newkey rsa:2048 -nodes -keyout new.key -out new.csr -subj /CN=server-2 2>/dev/null && \
         openssl x509 -req -in new.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out new.pem -days 2 -extfile san.ext 2>/dev/null && \
         mv new.key server.key && mv new.pem server.pem",
    );
    assert!(
        eventually(Duration::from_secs(10), || served_subject(d, s.grpc.port())
            .contains("server-2")),
        "the rotated certificate was not picked up"
    );
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("gRPC TLS certificates reloaded")));
}

/// `--grpc-tls-client-san`: a client certificate the CA signed is refused
/// unless it names the required subject.
#[tokio::test]
async fn a_client_certificate_must_carry_the_required_name() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let path = |f: &str| dir.path().join(f).display().to_string();
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let rules = "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let mut answered = Vec::new();
    for san in ["localhost", "envoy.other.example"] {
        let s = Sluice::start(
            &[("web.yaml", rules)],
            &[
                "--grpc-tls-cert",
                &path("server.pem"),
                "--grpc-tls-key",
                &path("server.key"),
                "--grpc-tls-client-ca",
                &path("ca.pem"),
                "--grpc-tls-client-san",
                san,
            ],
        );
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.pem")))
            .identity(tonic::transport::Identity::from_pem(
                read("client.pem"),
                read("client.key"),
            ))
            .domain_name("localhost");
        let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", s.grpc))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect()
            .await;
        let ok = match channel {
            Ok(ch) => {
                let mut c = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(ch);
                c.should_rate_limit(common::request(
                    "web",
                    vec![common::descriptor(&[("k", "v")])],
                ))
                .await
                .is_ok()
            }
            Err(_) => false,
        };
        answered.push(ok);
    }
    assert_eq!(
        answered,
        [true, false],
        "served for localhost, refused for another name"
    );
}

/// A connection to the TLS listener that never starts its handshake is
/// closed at `--handshake-timeout`, and counted.
#[tokio::test]
async fn a_silent_tls_client_is_closed_at_the_handshake_timeout() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let path = |f: &str| dir.path().join(f).display().to_string();
    let s = Sluice::start(
        &[("web.yaml", "domain: web\ndescriptors:\n  - key: k\n")],
        &[
            "--grpc-tls-cert",
            &path("server.pem"),
            "--grpc-tls-key",
            &path("server.key"),
            "--handshake-timeout",
            "1s",
        ],
    );
    let mut silent = std::net::TcpStream::connect(s.grpc).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = [0u8; 16];
    // Closed by sluice (end of stream), not by the read timeout.
    match silent.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0, "sluice sent bytes to a silent client"),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "still open after 15 s: {e}"
        ),
    }
    assert!(common::eventually(
        Duration::from_secs(5),
        || common::bound(&s, "handshake_timeout") >= 1.0
    ));
}
