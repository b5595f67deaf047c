//! xDS under hostile conditions: a stream that freezes (kept open,
//! forwarding nothing) is replaced; a burst of versions is coalesced and
//! the metric series of rules gone are dropped; a refused response shows
//! in `/readyz`.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::ads::{Ads, config, serve};
use common::*;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};

fn version(s: &Sluice) -> String {
    s.readyz()["config"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn free_addr() -> SocketAddr {
    format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap()
}

/// A TCP proxy that can freeze the connections it holds: they stay open
/// and forward nothing (a wedged middlebox); later ones pass.
struct Freezer {
    addr: SocketAddr,
    /// Connections with an id below this forward nothing.
    frozen_below: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
}

impl Freezer {
    async fn start(target: SocketAddr) -> Freezer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen_below = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (frozen, count) = (frozen_below.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = count.fetch_add(1, Relaxed);
                let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, id, frozen.clone()));
                tokio::spawn(pipe(sr, cw, id, frozen.clone()));
            }
        });
        Freezer {
            addr,
            frozen_below,
            accepted,
        }
    }

    fn freeze_open_connections(&self) {
        self.frozen_below
            .store(self.accepted.load(Relaxed), Relaxed);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    frozen_below: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16384];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        if id < frozen_below.load(Relaxed) {
            // Wedged: hold the socket, forward nothing, ever.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_stream_is_replaced() {
    let ads_addr = free_addr();
    let ads = Ads::default();
    ads.push("v1", &[config(3, 2)]);
    let _server = serve(ads.clone(), ads_addr);
    let proxy = Freezer::start(ads_addr).await;
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &proxy.addr.to_string(),
            "--xds-keepalive-interval",
            "1s",
            "--xds-keepalive-timeout",
            "1s",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || version(&s) == "v1"));
    proxy.freeze_open_connections();
    ads.push("v2", &[config(3, 5)]);
    // The frozen stream never carries v2; its replacement does.
    assert!(
        eventually(Duration::from_secs(20), || version(&s) == "v2"),
        "{}",
        s.readyz()
    );
    let failed = metric(
        &s.get("/metrics").1,
        "sluice_bound_hits_total{bound=\"xds_stream_failed\"}",
    );
    assert!(failed >= Some(1.0), "{failed:?}");
}

fn keyed(key: &str) -> RateLimitConfig {
    RateLimitConfig {
        name: "xds-rules".into(),
        domain: "xds".into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: 3,
                requests_per_unit: 10,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

/// 300 versions in a burst, each a different rule: a handful of
/// generations are applied (not 300), the last one wins, and `/metrics`
/// keeps series only for the rule in force (a rule has series once it has
/// counted: the first and the last are asked once each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_versions_is_coalesced_and_old_series_leave() {
    let ads_addr = free_addr();
    let ads = Ads::default();
    ads.push("v0", &[keyed("k0")]);
    let _server = serve(ads.clone(), ads_addr);
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &["--config-xds", &ads_addr.to_string()],
    );
    assert!(eventually(Duration::from_secs(10), || version(&s) == "v0"));
    let mut c = s.client().await;
    ask(&mut c, "xds", &[("k0", "a")]).await;
    assert!(s.get("/metrics").1.contains("rule=\"k0\""));
    for i in 1..=300 {
        ads.push(&format!("v{i}"), &[keyed(&format!("k{i}"))]);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(eventually(Duration::from_secs(20), || version(&s) == "v300"));
    let loads = metric(&s.get("/metrics").1, "sluice_config_loads_total").unwrap();
    assert!(loads < 30.0, "{loads} generations applied for 300 versions");
    let coalesced = metric(
        &s.get("/metrics").1,
        "sluice_bound_hits_total{bound=\"xds_coalesced\"}",
    );
    assert!(coalesced > Some(200.0), "{coalesced:?}");
    ask(&mut c, "xds", &[("k300", "a")]).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = s.get("/metrics").1;
            let series = m
                .lines()
                .filter(|l| {
                    l.starts_with("sluice_rule_total_hits_total{domain=\"xds\"")
                        && !l.contains("_override")
                })
                .count();
            series == 1 && m.contains("rule=\"k300\"")
        }),
        "{}",
        s.get("/metrics")
            .1
            .lines()
            .filter(|l| l.starts_with("sluice_rule_total_hits_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A response over the gRPC message limit is refused: `/readyz` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_response_shows_in_readyz() {
    let ads_addr = free_addr();
    let ads = Ads::default();
    let huge: Vec<RateLimitConfig> = (0..40_000)
        .map(|i| keyed(&format!("key-{i:0>120}")))
        .collect();
    ads.push("v1", &huge);
    let _server = serve(ads.clone(), ads_addr);
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &["--config-xds", &ads_addr.to_string()],
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            s.readyz()["config"]["last_error"]
                .as_str()
                .unwrap_or_default()
                .contains("xDS stream failed")
        }),
        "{}",
        s.readyz()
    );
}
