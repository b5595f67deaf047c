//! The real binary, driven over gRPC: limits, keys, replaces, shadow mode,
//! unlimited, unknown domains, invalid requests and exactness.

mod common;

use common::*;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::Code as GrpcCode;

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    value: banned
    rate_limit: {name: banned, unit: hour, requests_per_unit: 0}
  - key: plan
    value: vip
    rate_limit: {unit: hour, requests_per_unit: 5, replaces: [{name: banned}]}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: route
    value: login
    descriptors:
      - key: ip
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: svc
    value: a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {backend: a}
  - key: svc
    value: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
    metadata: {backend: b}
";

fn rules() -> [(&'static str, &'static str); 1] {
    [("shop.yaml", RULES)]
}

#[tokio::test]
async fn limit_is_reached_at_exactly_n_per_key() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    for i in 0..3u32 {
        let r = ask(&mut c, "shop", &[("ip", "1.1.1.1")]).await;
        assert_eq!(r.overall_code, OK, "request {i}");
        assert_eq!(r.statuses[0].limit_remaining, 2 - i);
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 3));
        assert!(r.statuses[0].duration_until_reset.as_ref().unwrap().seconds >= 1);
        assert_eq!(retry_after(&r), None, "OK answers carry no Retry-After");
    }
    let r = ask(&mut c, "shop", &[("ip", "1.1.1.1")]).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].code, OVER);
    let wait = retry_after(&r).expect("Retry-After on OVER_LIMIT");
    assert!((1..=3600).contains(&wait));
    assert_eq!(
        wait as i64,
        r.statuses[0].duration_until_reset.as_ref().unwrap().seconds
    );
    // Another value of the same key has its own counter.
    assert_eq!(
        ask(&mut c, "shop", &[("ip", "2.2.2.2")]).await.overall_code,
        OK
    );
    // Nested: the same key under another parent is a different rule and counter.
    for _ in 0..2 {
        assert_eq!(
            ask(&mut c, "shop", &[("route", "login"), ("ip", "1.1.1.1")])
                .await
                .overall_code,
            OK
        );
    }
    assert_eq!(
        ask(&mut c, "shop", &[("route", "login"), ("ip", "1.1.1.1")])
            .await
            .overall_code,
        OVER
    );
}

#[tokio::test]
async fn statuses_come_one_per_descriptor_in_order() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    let req = request(
        "shop",
        vec![
            descriptor(&[("nomatch", "x")]),
            descriptor(&[("internal", "x")]),
            descriptor(&[("user", "banned")]),
            descriptor(&[("ip", "9.9.9.9")]),
        ],
    );
    let r = c.should_rate_limit(req).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses.len(), 4);
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].current_limit.is_none()),
        (OK, true)
    );
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX, "unlimited");
    assert!(r.statuses[1].current_limit.is_none());
    assert_eq!(r.statuses[2].code, OVER, "a limit of 0 blocks");
    assert_eq!((r.statuses[3].code, r.statuses[3].limit_remaining), (OK, 2));
}

#[tokio::test]
async fn replaces_drops_the_named_limit() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    let both = || {
        request(
            "shop",
            vec![
                descriptor(&[("user", "banned")]),
                descriptor(&[("plan", "vip")]),
            ],
        )
    };
    for i in 0..5 {
        let r = c.should_rate_limit(both()).await.unwrap().into_inner();
        assert_eq!(r.overall_code, OK, "request {i}");
        assert!(
            r.statuses[0].current_limit.is_none(),
            "replaced limit reports no limit"
        );
    }
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OVER, "the replacing limit still applies");
    // Alone, the banned limit applies.
    assert_eq!(
        ask(&mut c, "shop", &[("user", "banned")])
            .await
            .overall_code,
        OVER
    );
}

#[tokio::test]
async fn shadow_mode_per_rule_and_global() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    for _ in 0..3 {
        let r = ask(&mut c, "shop", &[("trial", "t")]).await;
        assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
        assert_eq!(retry_after(&r), None);
    }
    let (_, text) = s.get("/metrics");
    assert_eq!(
        metric(
            &text,
            "sluice_rule_shadow_mode_total{domain=\"shop\",rule=\"trial\"}"
        ),
        Some(2.0)
    );

    let g = Sluice::start(&rules(), &["--shadow-mode"]);
    let mut c = g.client().await;
    let r = ask(&mut c, "shop", &[("user", "banned")]).await;
    assert_eq!(r.overall_code, OK, "global shadow allows");
    assert_eq!(r.statuses[0].code, OVER, "but the status tells the truth");
    assert_eq!(retry_after(&r), None);
}

#[tokio::test]
async fn unknown_domain_is_allowed_and_counted() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    let r = c
        .should_rate_limit(request(
            "nope",
            vec![descriptor(&[("ip", "1")]), descriptor(&[("ip", "2")])],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 2);
    let (_, text) = s.get("/metrics");
    assert_eq!(metric(&text, "sluice_domain_not_found_total"), Some(1.0));
}

#[tokio::test]
async fn invalid_requests_get_invalid_argument() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    let e = c
        .should_rate_limit(request("", vec![descriptor(&[("ip", "1")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let e = c
        .should_rate_limit(request("shop", vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");
    let d = descriptor_with_limit(&[("ip", "1")], 1, 0);
    let e = c
        .should_rate_limit(request("shop", vec![d]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert!(e.message().contains("unknown unit"), "{}", e.message());
    // The service is still fine afterwards.
    assert_eq!(ask(&mut c, "shop", &[("ip", "1")]).await.overall_code, OK);
}

#[tokio::test]
async fn hits_addend_and_overrides() {
    let s = Sluice::start(&rules(), &[]);
    let mut c = s.client().await;
    let mut req = request("shop", vec![descriptor(&[("ip", "h")])]);
    req.hits_addend = 2;
    let r = c.should_rate_limit(req).await.unwrap().into_inner();
    assert_eq!(r.statuses[0].limit_remaining, 1);
    // A present per-descriptor 0 checks without counting.
    let mut d = descriptor(&[("ip", "h")]);
    d.hits_addend = Some(UInt64Value { value: 0 });
    let r = c
        .should_rate_limit(request("shop", vec![d]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
    // The per-descriptor value wins over the request's.
    let mut d = descriptor(&[("ip", "h")]);
    d.hits_addend = Some(UInt64Value { value: 2 });
    let mut req = request("shop", vec![d]);
    req.hits_addend = 1;
    assert_eq!(
        c.should_rate_limit(req)
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        OVER
    );

    // Envoy's limit override replaces the rule, even for an unconfigured key.
    let d = descriptor_with_limit(&[("anything", "x")], 1, 4);
    let r = c
        .should_rate_limit(request("shop", vec![d.clone()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit)),
        Some((1, 4))
    );
    assert_eq!(
        c.should_rate_limit(request("shop", vec![d]))
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        OVER
    );
}

#[tokio::test]
async fn quota_mode_and_dynamic_metadata() {
    let s = Sluice::start(&rules(), &["--response-dynamic-metadata"]);
    let mut c = s.client().await;
    let both = || {
        request(
            "shop",
            vec![descriptor(&[("svc", "a")]), descriptor(&[("svc", "b")])],
        )
    };
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OK);
    let md = r.dynamic_metadata.unwrap();
    let text = format!("{md:?}");
    assert!(text.contains("backend") && text.contains("\"a\""), "{text}");
    // Second: a is over, b still has quota.
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OK, OVER, OK)
    );
    // Third: both over.
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OVER);
    assert!(retry_after(&r).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_requests_admit_exactly_the_limit() {
    let s = Sluice::start(&rules(), &[]);
    let admitted = admitted(&[s.client().await], 1000, "shop", ("hot", "k")).await;
    assert_eq!(admitted, 100);
}

/// The composition root started inside the test process on port 0, with no
/// binary: it decides as the binary does, and its stop is the SIGTERM path
/// (drained, then the port is closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_starts_in_process_on_port_zero() {
    use clap::Parser as _;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let dir = config_dir(&rules());
    // A loopback address of this test's own: no other test can take the
    // port once sluice lets it go.
    let pid = std::process::id();
    let grpc_at = format!("127.77.{}.{}:0", (pid >> 8) & 0xff, (pid & 0xff).max(1));
    let argv = ["sluice", "serve", "--config"]
        .into_iter()
        .map(str::to_owned)
        .chain([dir.path().display().to_string()])
        .chain(["--grpc-addr".to_owned(), grpc_at.clone()])
        .chain(["--admin-addr", "127.0.0.1:0"].map(str::to_owned));
    let cli = sluice::cli::Cli::try_parse_from(argv).expect("flags");
    let Some(sluice::cli::Command::Serve(args)) = cli.command else {
        panic!("serve");
    };
    let running = sluice::app::start(*args).await.expect("starts");
    let grpc = running.grpc.expect("a TCP listener");
    assert!(listening_here(grpc), "this process listens on {grpc}");
    let mut c = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connects");
    let codes: Vec<i32> = {
        let mut codes = Vec::new();
        for _ in 0..4 {
            codes.push(
                ask(&mut c, "shop", &[("ip", "in-process")])
                    .await
                    .overall_code,
            );
        }
        codes
    };
    assert_eq!(codes, [OK, OK, OK, OVER]);
    let admin = running.admin;
    let (code, _) = tokio::task::spawn_blocking(move || http(admin, "GET", "/healthcheck", ""))
        .await
        .expect("admin");
    assert_eq!(code, 200);
    running.stop().await.expect("drains");
    assert!(!listening_here(grpc), "the listener is closed once stopped");
}

/// Whether a socket of this process listens on `addr` (IPv4), from
/// `/proc/net/tcp` and this process's own descriptors: what a test in
/// another process does with the port cannot answer for it.
fn listening_here(addr: std::net::SocketAddr) -> bool {
    let std::net::SocketAddr::V4(v4) = addr else {
        panic!("IPv4 only: {addr}");
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A"))
        .filter_map(|f| f.get(9).map(|i| format!("socket:[{i}]")))
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .any(|link| inodes.iter().any(|i| link.as_os_str() == i.as_str()))
}
