//! Rules over xDS against a management server written for this test, on the
//! real protocol with the real protos (ADS, state of the world): the first
//! config, an update, a bad update NACKed while the last good rules keep
//! deciding, and a server restart.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::ads::{Ads, config, serve, serve_tls};
use common::*;

fn version(s: &Sluice) -> String {
    s.readyz()["config"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn admitted_of(c: &mut Client, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(ask(c, "xds", &[("k", value)]).await.overall_code == OK);
    }
    ok
}

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_follow_the_management_server() {
    let addr: SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap();
    let ads = Ads::default();
    ads.push("v1", &[config(3, 2)]);
    let server = serve(ads.clone(), addr);
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-node-id",
            "sluice-test",
            "--xds-node-metadata",
            "cluster=edge,zone=a",
        ],
    );
    assert!(
        eventually(Duration::from_secs(10), || version(&s) == "v1"),
        "{}",
        s.readyz()
    );
    let r = s.readyz();
    assert_eq!(r["config"]["source"], "xds");
    let mut c = s.client().await;
    assert_eq!(admitted_of(&mut c, "a", 3).await, 2, "v1: 2 per hour");
    the_ack_names_the_version_and_the_node(&ads);

    let (_, rl) = s.get("/rlconfig");
    assert!(rl.contains("xds.k: unit=HOUR requests_per_unit=2"), "{rl}");

    // An update: 5 per hour.
    ads.push("v2", &[config(3, 5)]);
    assert!(eventually(Duration::from_secs(10), || version(&s) == "v2"));
    assert_eq!(admitted_of(&mut c, "b", 6).await, 5, "v2: 5 per hour");
    assert!(eventually(Duration::from_secs(10), || ads
        .answer("v2")
        .is_some()));
    assert!(ads.answer("v2").is_some_and(|a| a.version_info == "v2"));

    a_bad_update_is_nacked_and_v2_decides(&ads, &s, &mut c).await;

    // The management server restarts with new rules: sluice reconnects.
    // (Ending the streams lets the old server's graceful shutdown finish,
    // as a process exit would.)
    ads.0.lock().unwrap().streams.clear();
    server.cancel();
    a_restarted_server_is_followed(addr, &s, &mut c).await;
}

/// The management server restarted with new rules (v4): sluice reconnects,
/// resubscribing with the version in force (v2).
async fn a_restarted_server_is_followed(addr: SocketAddr, s: &Sluice, c: &mut Client) {
    let ads = Ads::default();
    ads.push("v4", &[config(3, 1)]);
    let _server = serve(ads.clone(), addr);
    assert!(
        eventually(Duration::from_secs(20), || version(s) == "v4"),
        "{}",
        s.readyz()
    );
    assert_eq!(admitted_of(c, "d", 3).await, 1, "v4: 1 per hour");
    let resub = ads
        .0
        .lock()
        .unwrap()
        .heard
        .first()
        .cloned()
        .expect("a subscription");
    assert_eq!(
        resub.version_info, "v2",
        "resubscribed with the version in force"
    );
}

/// A bad update (no unit) is NACKed with its error, naming the version in
/// force, and v2 keeps deciding.
async fn a_bad_update_is_nacked_and_v2_decides(ads: &Ads, s: &Sluice, c: &mut Client) {
    // A bad update (no unit): NACKed, and v2 keeps deciding.
    ads.push("v3", &[config(0, 7)]);
    assert!(eventually(Duration::from_secs(10), || ads
        .answer("v3")
        .is_some()));
    let nack = ads.answer("v3").unwrap();
    assert_eq!(nack.version_info, "v2", "a NACK names the version in force");
    let detail = nack.error_detail.expect("NACK with the error");
    assert!(
        detail.message.contains("invalid rate limit unit"),
        "{}",
        detail.message
    );
    assert_eq!(version(s), "v2");
    assert!(
        s.readyz()["config"]["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid rate limit unit")
    );
    assert_eq!(admitted_of(c, "c", 6).await, 5, "still v2");
}

/// A version is in force before its ACK reaches the server; the ACK names
/// the version and the node, with its metadata.
fn the_ack_names_the_version_and_the_node(ads: &Ads) {
    // A version is in force before its ACK reaches the server.
    assert!(eventually(Duration::from_secs(10), || ads
        .answer("v1")
        .is_some()));
    let ack = ads.answer("v1").expect("an ACK for v1");
    assert_eq!(ack.version_info, "v1");
    assert!(ack.error_detail.is_none());
    let node = ack.node.as_ref().unwrap();
    assert_eq!(node.id, "sluice-test");
    let zone = &node.metadata.as_ref().expect("node metadata").fields["zone"];
    assert_eq!(format!("{:?}", zone.kind), "Some(StringValue(\"a\"))");
}

/// Envoy Gateway speaks mutual TLS to its rate-limit service's xDS client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_come_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(
            read("server.pem"),
            read("server.key"),
        ))
        .client_ca_root(tonic::transport::Certificate::from_pem(read("ca.pem")));
    let addr: SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap();
    let ads = Ads::default();
    ads.push("t1", &[config(3, 2)]);
    let _server = serve_tls(ads.clone(), addr, Some(tls));
    let path = |f: &str| dir.path().join(f).display().to_string();
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-tls-ca",
            &path("ca.pem"),
            "--xds-tls-cert",
            &path("client.pem"),
            "--xds-tls-key",
            &path("client.key"),
        ],
    );
    assert!(
        eventually(Duration::from_secs(10), || version(&s) == "t1"),
        "{}",
        s.readyz()
    );
    // The version is in force before its ACK reaches the server: wait for it.
    assert!(
        eventually(Duration::from_secs(10), || ads.answer("t1").is_some()),
        "t1 never answered"
    );
    assert!(ads.answer("t1").is_some_and(|a| a.error_detail.is_none()));
    // A stranger (no client certificate) is refused by the server.
    let stranger = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-tls-ca",
            &path("ca.pem"),
        ],
    );
    assert!(eventually(Duration::from_secs(10), || stranger
        .logs_contain("xDS stream failed")));
    assert_eq!(
        version(&stranger),
        "",
        "no rules without a client certificate"
    );
}

/// Two pushed rules of 2 a minute, both given a 4-second window by the
/// overlay, one also a sliding window; each a key with any value, so each
/// try of the boundary below has fresh counters.
fn shaped_config() -> envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig {
    let mut c = config(2, 2);
    let mut sliding = c.descriptors[0].clone();
    c.descriptors[0].key = "fixed".into();
    sliding.key = "sliding".into();
    c.descriptors.push(sliding);
    c
}

const SHAPES: &str = "domain: xds\ndescriptors:\n  - key: fixed\n    rate_limit: {window: 4s}\n  - key: sliding\n    rate_limit: {window: 4s, algorithm: sliding_window}\n";

/// Admitted of two hits just before a 4 s boundary and two just after,
/// on `key` with a fresh value; `None` when the machine was too slow to
/// put the two before the boundary.
async fn across_a_boundary(c: &mut Client, key: &str, value: &str) -> Option<usize> {
    let ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 4_000
    };
    while !(3_000..3_300).contains(&ms()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut ok = 0;
    for _ in 0..2 {
        ok += usize::from(ask(c, "xds", &[(key, value)]).await.overall_code == OK);
    }
    if ms() < 3_000 {
        return None;
    }
    while ms() >= 3_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..2 {
        ok += usize::from(ask(c, "xds", &[(key, value)]).await.overall_code == OK);
    }
    Some(ok)
}

/// An operator gives pushed rules sluice's shapes through `--xds-overlay`:
/// the control plane keeps the number, the overlay gives the window and the
/// algorithm, and an edit of the overlay is taken as a rule file's is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_gives_pushed_rules_a_sliding_window() {
    let addr: SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap();
    let ads = Ads::default();
    ads.push("v1", &[shaped_config()]);
    let _server = serve(ads.clone(), addr);
    let overlay = config_dir(&[("shapes.yaml", SHAPES)]);
    let overlay_dir = overlay.path().to_str().unwrap().to_owned();
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-overlay",
            &overlay_dir,
        ],
    );
    assert!(eventually(Duration::from_secs(10), || version(&s) == "v1"));
    let (_, rl) = s.get("/rlconfig");
    assert!(
        rl.contains("xds.sliding: window=4s requests_per_unit=2 algorithm=sliding_window"),
        "{rl}"
    );
    assert!(
        rl.contains("xds.fixed: window=4s requests_per_unit=2"),
        "{rl}"
    );
    let mut c = s.client().await;
    let mut tries = 0;
    let (fixed, sliding) = loop {
        tries += 1;
        assert!(tries <= 5, "never two hits before a boundary");
        let v = format!("try{tries}");
        let Some(fixed) = across_a_boundary(&mut c, "fixed", &v).await else {
            continue;
        };
        let Some(sliding) = across_a_boundary(&mut c, "sliding", &v).await else {
            continue;
        };
        break (fixed, sliding);
    };
    assert_eq!(
        fixed, 4,
        "a fixed window admits 2 before its end and 2 after"
    );
    // The estimate (rounded down) weighs the 2 before as 1 in the new
    // window's first half: one more fits, the second does not.
    assert_eq!(sliding, 3, "the sliding window still weighs the 2 before");

    an_edited_overlay_is_live_and_a_broken_one_changes_nothing(&s, overlay.path());
}

/// The overlay edited: the sliding rule becomes a token bucket, live; then a
/// broken overlay changes nothing and says why.
fn an_edited_overlay_is_live_and_a_broken_one_changes_nothing(s: &Sluice, overlay: &Path) {
    // The overlay edited: the sliding rule becomes a token bucket, live.
    std::fs::write(
        overlay.join("shapes.yaml"),
        SHAPES.replace(
            "algorithm: sliding_window",
            "algorithm: token_bucket, burst: 5",
        ),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || s
            .get("/rlconfig")
            .1
            .contains("algorithm=token_bucket burst=5")),
        "{}",
        s.get("/rlconfig").1
    );
    // A broken overlay changes nothing and says why.
    std::fs::write(
        overlay.join("shapes.yaml"),
        "domain: xds\ndescriptors:\n  - key: fixed\n    rate_limit: {requests_per_unit: 100}\n",
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || s.readyz()["config"]
        ["last_error"]
        .as_str()
        .unwrap_or_default()
        .contains("requests_per_unit comes from the control plane")));
    assert!(
        s.get("/rlconfig")
            .1
            .contains("algorithm=token_bucket burst=5")
    );
}
