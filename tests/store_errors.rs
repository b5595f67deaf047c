//! A store that cannot be used says why in its own words, in the log and in
//! `/readyz`, once per change: a refused port, Redis's protected-mode
//! `DENIED`, `NOAUTH`, a TLS failure and a DNS failure, each on a real
//! redis-server (or a name that does not resolve), never bb8's pool timeout.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::redis::{RedisServer, free_port};
use common::*;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
";

fn start(url: &str) -> Sluice {
    Sluice::start(
        &[("shop.yaml", RULES)],
        &["--redis-url", url, "--redis-timeout", "300ms"],
    )
}

/// `/readyz`'s store detail once it says why the store is down.
fn detail(s: &Sluice, words: &str) -> String {
    let mut last = String::new();
    eventually(Duration::from_secs(10), || {
        last = s.readyz()["store"]["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        last.contains(words)
    });
    last
}

fn assert_says(s: &Sluice, words: &str) {
    let d = detail(s, words);
    assert!(d.contains(words), "/readyz says {d:?}, not {words:?}");
    assert!(
        !d.contains("bb8"),
        "a pool timeout instead of the cause: {d}"
    );
    assert!(
        eventually(Duration::from_secs(5), || s.logs_contain(words)),
        "the log does not say {words:?}: {:?}",
        s.logs.lock().unwrap()
    );
}

/// Forwards connections on `listen` to Redis on 127.0.0.1:`to`, from the
/// source address 127.0.0.3: to Redis a client from elsewhere, which
/// protected mode refuses (only 127.0.0.1 and ::1 count as local).
async fn relay_from_elsewhere(listen: TcpListener, to: u16) {
    loop {
        let Ok((mut inbound, _)) = listen.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let socket = TcpSocket::new_v4().expect("socket");
            socket
                .bind(SocketAddr::from(([127, 0, 0, 3], 0)))
                .expect("bind 127.0.0.3");
            let Ok(mut out) = socket.connect(SocketAddr::from(([127, 0, 0, 1], to))).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
        });
    }
}

#[test]
fn a_refused_port_says_connection_refused() {
    let s = start(&format!("redis://127.0.0.1:{}", free_port()));
    assert_says(&s, "Connection refused");
}

#[test]
fn a_name_that_does_not_resolve_says_so() {
    let s = start("redis://no-such-host.invalid:6379");
    assert_says(&s, "failed to lookup address information");
}

#[test]
fn noauth_is_redis_own_reply() {
    let redis = RedisServer::start_tls();
    // The TLS server knows user `app`; no credentials at all is NOAUTH.
    let s = start(&format!("rediss://127.0.0.1:{}/#insecure", redis.port));
    assert_says(&s, "NOAUTH");
}

#[test]
fn an_untrusted_certificate_is_a_tls_error() {
    let redis = RedisServer::start_tls();
    // Verified against the public roots: the test CA is unknown.
    let s = start(&format!("rediss://app:pw@127.0.0.1:{}/", redis.port));
    assert_says(&s, "invalid peer certificate");
}

/// Protected mode answers `-DENIED ...` and hangs up before reading a
/// command, so the client sees only a broken pipe unless it reads what the
/// server said. Refused first, then DENIED: each cause is logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_mode_says_denied_and_each_cause_is_logged_once() {
    let redis = RedisServer::start();
    let port = free_port();
    let s = start(&format!("redis://127.0.0.1:{port}"));
    assert_says(&s, "Connection refused");
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let relay = tokio::spawn(relay_from_elsewhere(listener, redis.port));
    // Sanity: the relay does reach Redis as a foreign client.
    let mut probe = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("relay");
    let mut said = String::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read_to_string(&mut probe, &mut said),
    )
    .await;
    assert!(said.starts_with("-DENIED"), "redis said {said:?}");
    assert_says(&s, "DENIED Redis is running in protected mode");
    // Probes keep failing, every few hundred ms, for the same reason: the
    // log says each reason once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let logs = s.logs.lock().unwrap().clone();
    let count = |w: &str| logs.iter().filter(|l| l.contains(w)).count();
    assert_eq!(count("Connection refused"), 1, "{logs:#?}");
    assert_eq!(count("DENIED Redis is running"), 1, "{logs:#?}");
    relay.abort();
}

/// Stops `redis` and asks until `s` says it is degraded.
async fn take_down(s: &Sluice, redis: RedisServer) {
    drop(redis);
    let mut client = s.client().await;
    for _ in 0..10 {
        let _ = ask(&mut client, "shop", &[("ip", "a")]).await;
    }
    assert!(eventually(Duration::from_secs(10), || s.status() == "degraded"));
}

/// `/healthcheck` as the reference's: failing until the store has answered
/// once, then passing even while it is down (the failure policy answers);
/// `--healthcheck-needs-store` fails it while down, `--healthcheck-needs-rules`
/// until a domain is loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_follows_the_reference() {
    let port = free_port();
    let s = start(&format!("redis://127.0.0.1:{port}"));
    let (code, body) = s.get("/healthcheck");
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("the store has not answered yet"), "{body}");
    let redis = RedisServer::start_on(port, false);
    assert!(eventually(Duration::from_secs(10), || s
        .get("/healthcheck")
        == (200, "OK".into())));
    take_down(&s, redis).await;
    assert_eq!(
        s.get("/healthcheck").0,
        200,
        "still passing while the policy answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_needs_store_fails_while_the_store_is_down() {
    let redis = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let strict = Sluice::start(
        &[("shop.yaml", RULES)],
        &[
            "--redis-url",
            &url,
            "--redis-timeout",
            "300ms",
            "--healthcheck-needs-store",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || strict
        .get("/healthcheck")
        .0
        == 200));
    take_down(&strict, redis).await;
    let (code, body) = strict.get("/healthcheck");
    assert_eq!(code, 500);
    assert!(body.contains("the store is down"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_needs_rules_fails_before_the_first_rules() {
    // Before the first xDS response (a server that never answers).
    let xds = format!("127.0.0.1:{}", free_port());
    let empty = Sluice::start(
        &[("shop.yaml", RULES)],
        &["--config-xds", &xds, "--healthcheck-needs-rules"],
    );
    let (code, body) = empty.get("/healthcheck");
    assert_eq!(code, 500);
    assert!(body.contains("no rules loaded yet"), "{body}");
    // And it answers nothing it cannot judge: an OK would admit what the
    // rules may refuse, so Envoy's failure_mode_deny decides (the
    // reference's answer too).
    let err = empty
        .client()
        .await
        .should_rate_limit(common::request(
            "shop",
            vec![common::descriptor(&[("user", "u1")])],
        ))
        .await
        .expect_err("no rules: no answer");
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(
        err.message().contains("no rate limit configuration loaded"),
        "{err:?}"
    );
    let rules = Sluice::start(&[("shop.yaml", RULES)], &["--healthcheck-needs-rules"]);
    assert_eq!(rules.get("/healthcheck"), (200, "OK".into()));
}
