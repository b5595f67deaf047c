//! TLS and ACL credentials, and that none reaches the logs.

use super::*;
use common::redis::free_port;

#[tokio::test]
async fn tls_and_acl_credentials() {
    let redis = RedisServer::start_tls();
    // A self-signed test certificate: `#insecure` skips verification.
    let url = format!("rediss://app:pw@127.0.0.1:{}/#insecure", redis.port);
    let s = start(&["--redis-url", &url, "--redis-timeout", "2s"]);
    wait_ready(&s);
    let mut c = s.client().await;
    for _ in 0..3 {
        assert_eq!(ask(&mut c, "shop", &[("ip", "tls")]).await.overall_code, OK);
    }
    assert_eq!(
        ask(&mut c, "shop", &[("ip", "tls")]).await.overall_code,
        OVER
    );
    assert!(
        !s.logs.lock().unwrap().iter().any(|l| l.contains("app:pw")),
        "password masked"
    );

    let wrong = start(&[
        "--redis-url",
        &format!("rediss://app:nope@127.0.0.1:{}/#insecure", redis.port),
    ]);
    assert!(eventually(Duration::from_secs(5), || wrong
        .logs_contain("store unreachable at startup")));
    assert!(wrong.get("/readyz").1.contains("\"status\":\"degraded\""));

    // Verified against a private CA, no `#insecure`.
    let verified = format!("rediss://app:pw@127.0.0.1:{}/", redis.port);
    let ca = redis.dir().join("ca.pem").display().to_string();
    let s = start(&[
        "--redis-url",
        &verified,
        "--redis-timeout",
        "2s",
        "--redis-tls-ca",
        &ca,
    ]);
    wait_ready(&s);
    let untrusted = start(&["--redis-url", &verified, "--redis-timeout", "2s"]);
    assert!(eventually(Duration::from_secs(5), || untrusted
        .logs_contain("store unreachable at startup")));
}

#[test]
fn credentials_never_reach_the_logs() {
    let s = start(&[
        "--redis-url",
        &format!("redis://app:s3cret-pw@127.0.0.1:{}", free_port()),
    ]);
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("store unreachable at startup")));
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("app:***@")));
    assert!(
        !s.logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("s3cret-pw"))
    );
    assert!(!s.get("/readyz").1.contains("s3cret-pw"));
}
