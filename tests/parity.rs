//! Parity with envoyproxy/ratelimit's settings and stats: statsd packets with
//! the reference's names, global quota mode, the near-limit ratio, and the
//! global shadow mode counter.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;

const RULES: &str = "
domain: web
descriptors:
  - key: k1
    value: v1
    descriptors:
      - key: sub
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// Every statsd line received within `within` until `done` says enough.
fn receive(sock: &UdpSocket, within: Duration, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    sock.set_read_timeout(Some(Duration::from_millis(100))).ok();
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline && !done(&lines) {
        if let Ok(n) = sock.recv(&mut buf) {
            lines.extend(
                String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .map(str::to_owned),
            );
        }
    }
    lines
}

/// statsd counter lines summed by name and tags: counters go as their
/// increase per flush, so one count may arrive split over two flushes on a
/// busy machine, and the sums are what compare.
fn summed(lines: &[String]) -> Vec<String> {
    let mut sums: std::collections::BTreeMap<(String, String), u64> = Default::default();
    for l in lines {
        let Some((name, rest)) = l.split_once(':') else {
            continue;
        };
        let mut parts = rest.splitn(2, "|c");
        if let (Some(v), Some(tags)) = (parts.next(), parts.next())
            && let Ok(v) = v.parse::<u64>()
        {
            *sums.entry((name.to_owned(), tags.to_owned())).or_default() += v;
        }
    }
    sums.into_iter()
        .map(|((name, tags), v)| format!("{name}:{v}|c{tags}"))
        .collect()
}

#[tokio::test]
async fn statsd_carries_the_references_stat_names() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--statsd-addr",
            &addr,
            "--statsd-flush-interval",
            "100ms",
            "--statsd-tags",
            "env:test",
            "--shadow-mode",
        ],
    );
    let mut c = s.client().await;
    for _ in 0..3 {
        ask(&mut c, "web", &[("k1", "v1"), ("sub", "x")]).await;
    }
    ask(&mut c, "web", &[("ip", "10.0.0.1")]).await;
    let want = [
        "ratelimit.service.rate_limit.web.k1_v1.sub.total_hits:3|c|#env:test",
        "ratelimit.service.rate_limit.web.k1_v1.sub.over_limit:1|c|#env:test",
        "ratelimit.service.rate_limit.web.k1_v1.sub.within_limit:2|c|#env:test",
        // detailed_metric: the runtime value, with the IPv4 dots sanitised.
        "ratelimit.service.rate_limit.web.ip_10_0_0_1.total_hits:1|c|#env:test",
        // --shadow-mode let the third request through.
        "ratelimit.service.global_shadow_mode:1|c|#env:test",
    ];
    let lines = receive(&sock, Duration::from_secs(10), |l| {
        let sums = summed(l);
        want.iter().all(|w| sums.iter().any(|x| x == w))
    });
    let sums = summed(&lines);
    for w in want {
        assert!(sums.iter().any(|l| l == w), "{w} not in {sums:#?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit_server.ShouldRateLimit.total_requests:")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("ratelimit_server.ShouldRateLimit.response_time:")
                && l.contains("|ms")
        ),
        "{lines:#?}"
    );
    let m = s.get("/metrics").1;
    assert_eq!(metric(&m, "sluice_global_shadow_mode_total"), Some(1.0));
}

#[tokio::test]
async fn global_quota_mode_makes_every_descriptor_a_quota() {
    let s = Sluice::start(&[("web.yaml", RULES)], &["--quota-mode"]);
    let mut c = s.client().await;
    let both = || {
        request(
            "web",
            vec![descriptor(&[("a", "x")]), descriptor(&[("b", "x")])],
        )
    };
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OK);
    // Both over: only now is the request over (one alone would not be).
    let r = c.should_rate_limit(both()).await.unwrap().into_inner();
    assert_eq!(r.overall_code, OVER);
    let s2 = Sluice::start(&[("web.yaml", RULES)], &["--quota-mode"]);
    let mut c2 = s2.client().await;
    ask(&mut c2, "web", &[("a", "y")]).await;
    let r = c2
        .should_rate_limit(request(
            "web",
            vec![descriptor(&[("a", "y")]), descriptor(&[("b", "y")])],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK, "one quota still has room");
}

#[tokio::test]
async fn the_near_limit_ratio_is_a_setting() {
    let s = Sluice::start(&[("web.yaml", RULES)], &["--near-limit-ratio", "0.5"]);
    let mut c = s.client().await;
    for i in 0..7 {
        ask(&mut c, "web", &[("ip", &format!("n{}", i / 7))]).await;
    }
    let m = s.get("/metrics").1;
    // 10 per hour at 0.5: hits 6 and 7 are near the limit (0.8 would say 0).
    assert_eq!(
        metric(
            &m,
            "sluice_rule_near_limit_total{domain=\"web\",rule=\"ip_n0\"}"
        ),
        Some(2.0),
        "{m}"
    );
}

/// `--stop-increment-when-over-limit`: once one descriptor is over, a
/// request spends nothing of its other descriptors' budgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_spares_the_other_budgets() {
    let redis = common::redis::RedisServer::start();
    let url = redis.url();
    let rules = "domain: web\ndescriptors:\n  - key: small\n    rate_limit: {unit: hour, requests_per_unit: 3}\n  - key: big\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";
    for (extra, spared) in [
        (vec!["--stop-increment-when-over-limit"], true),
        (
            vec![
                "--stop-increment-when-over-limit",
                "--redis-url",
                &url,
                "--redis-timeout",
                "2s",
            ],
            true,
        ),
        (vec![], false),
    ] {
        let s = Sluice::start(&[("web.yaml", rules)], &extra);
        assert!(eventually(Duration::from_secs(10), || s
            .get("/readyz")
            .1
            .contains("\"status\":\"ready\"")));
        let mut c = s.client().await;
        let both = || {
            request(
                "web",
                vec![descriptor(&[("small", "k")]), descriptor(&[("big", "k")])],
            )
        };
        let mut big_left = Vec::new();
        for _ in 0..6 {
            let r = c.should_rate_limit(both()).await.unwrap().into_inner();
            big_left.push(r.statuses[1].limit_remaining);
        }
        if spared {
            assert_eq!(big_left, [9, 8, 7, 7, 7, 7], "{extra:?}");
        } else {
            assert_eq!(big_left, [9, 8, 7, 6, 5, 4]);
        }
    }
}

/// Envoy Gateway's dashboard (charts/gateway-addons-helm/dashboards/
/// global-ratelimit.json, kept in tests/compat/envoy-gateway) reads the
/// reference's stats through its statsd_exporter mapping: with the same
/// mapping file, every query of it on sluice's rate-limit series returns
/// a series after traffic, on `--reference-metrics-addr`, while sluice's
/// own names stay on the admin port.
#[tokio::test]
async fn envoy_gateways_dashboard_queries_find_their_series() {
    let compat = workspace().join("tests/compat/envoy-gateway");
    let route = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
    let rules = format!(
        "domain: default/eg/http\ndescriptors:\n  - key: {route}\n    value: {route}\n    rate_limit: null\n    descriptors:\n      - key: rule-0-match-0\n        value: rule-0-match-0\n        rate_limit: {{unit: hour, requests_per_unit: 2}}\n"
    );
    let port = common::redis::free_port();
    let mapper = compat.join("statsd_conf.yaml");
    let addr = format!("127.0.0.1:{port}");
    let s = Sluice::start(
        &[("eg.yaml", &rules)],
        &[
            "--reference-metrics-addr",
            &addr,
            "--reference-metrics-mapper",
            mapper.to_str().expect("path"),
        ],
    );
    let mut c = s.client().await;
    for _ in 0..3 {
        ask(
            &mut c,
            "default/eg/http",
            &[(route, route), ("rule-0-match-0", "rule-0-match-0")],
        )
        .await;
    }
    let (code, text) = http(addr.parse().expect("addr"), "GET", "/metrics", "");
    assert_eq!(code, 200);
    assert!(!text.contains("sluice_"), "only the reference's names here");
    let dashboard =
        std::fs::read_to_string(compat.join("global-ratelimit.json")).expect("dashboard");
    let exprs: Vec<String> = dashboard
        .split("\"expr\": \"")
        .skip(1)
        .filter_map(|rest| rest.split("\",").next())
        .map(|e| {
            e.replace("\\\"", "\"")
                .replace("$DefaultDomain", "default/eg/http")
        })
        .filter(|e| e.starts_with("ratelimit_service_") || e.starts_with("(process_"))
        .collect();
    assert_eq!(exprs.len(), 5, "{exprs:?}");
    each_query_finds_its_series(exprs, &text);

    // The counts are the rule's.
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("ratelimit_service_rate_limit_over_limit{")
                && l.contains("key2=\"rule-0-match-0_rule-0-match-0\"")
        })
        .expect("over_limit");
    assert!(line.ends_with(" 1"), "{line}");
    assert!(
        metric_families(&s.get("/metrics").1)
            .iter()
            .any(|f| f.starts_with("sluice_"))
    );
}

/// Each of the dashboard's queries finds a series in `text` with its name and
/// labels, leaving out those Prometheus adds from the pod.
fn each_query_finds_its_series(exprs: Vec<String>, text: &str) {
    for expr in exprs {
        let e = expr.trim_start_matches('(');
        let name: String = e
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Labels Prometheus adds from the pod (app_kubernetes_io_*) are not
        // the exporter's to give.
        let want: Vec<String> = e
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map(|(labels, _)| {
                labels
                    .split(", ")
                    .filter(|l| !l.starts_with("app_kubernetes_io"))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let found = text.lines().any(|l| {
            l.starts_with(&name)
                && l[name.len()..].starts_with(['{', ' '])
                && want.iter().all(|w| l.contains(w.as_str()))
        });
        assert!(found, "{expr}: no series in\n{text}");
    }
}
