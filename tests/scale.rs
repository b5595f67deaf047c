//! Rules at a platform's scale, with traffic running: a generated set of
//! 100,000 per-customer rules, one file as a billing system writes it (big
//! enough to be read in parts, on every core), passes `sluice check`,
//! loads, and reloads with new limits through files and through xDS; no
//! request fails or waits on the reload meanwhile, and the new limits are
//! served once whole.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::ads::{Ads, serve};
use common::*;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};

const CUSTOMERS: usize = 100_000;
/// A debug build loads 100,000 rules in some seconds; beside busy loops,
/// many more.
const LOAD: Duration = Duration::from_secs(180);
/// Reloads at the requests' own priority: at the default nice 10, beside
/// processes that keep every core busy (CI's neighbours, the suite's busy
/// loops), a debug build's reload of 100,000 rules gets about 5% of a core
/// and its time is the neighbours' to decide. What is tested here is that
/// requests are answered throughout and the new set lands whole.
const RELOAD_NICE: [&str; 2] = ["--reload-nice", "0"];

/// Customer `i`'s limit in a generation whose limits start at `base`.
fn limit(base: u32, i: usize) -> u32 {
    base + (i % 50) as u32
}

/// The rule file a billing system writes.
fn customers(base: u32) -> String {
    let mut s = String::from("domain: saas\ndescriptors:\n");
    for i in 0..CUSTOMERS {
        s.push_str(&format!(
            "  - key: api_key\n    value: cust{i:07}\n    rate_limit:\n      unit: minute\n      requests_per_unit: {}\n",
            limit(base, i)
        ));
    }
    s
}

/// The same rules as a control plane pushes them.
fn pushed(base: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: "saas".into(),
        domain: "saas".into(),
        descriptors: (0..CUSTOMERS)
            .map(|i| RateLimitDescriptor {
                key: "api_key".into(),
                value: format!("cust{i:07}"),
                rate_limit: Some(RateLimitPolicy {
                    unit: 2, // MINUTE
                    requests_per_unit: limit(base, i),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
    }
}

/// The limit `s` holds for customer `i` (a lookup, which spends nothing).
fn served(s: &Sluice, i: usize) -> Option<u64> {
    let body = format!(
        r#"{{"domain":"saas","descriptors":[{{"entries":[{{"key":"api_key","value":"cust{i:07}"}}]}}]}}"#
    );
    let (code, text) = s.post("/api/counters", &body);
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (code == 200)
        .then(|| v["descriptors"][0]["limits"][0]["limit"].as_u64())
        .flatten()
}

/// Requests spread over the customers until stopped: (answered, failed).
async fn traffic(s: &Sluice, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u64, u64)> {
    let mut c = s.client().await;
    tokio::spawn(async move {
        let (ok, failed) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut i = 0usize;
        while !stop.load(Relaxed) {
            i = (i + 7_919) % CUSTOMERS;
            let value = format!("cust{i:07}");
            let req = request("saas", vec![descriptor(&[("api_key", &value)])]);
            match c.should_rate_limit(req).await {
                Ok(r) if r.get_ref().overall_code == OK => ok.fetch_add(1, Relaxed),
                _ => failed.fetch_add(1, Relaxed),
            };
        }
        (ok.load(Relaxed), failed.load(Relaxed))
    })
}

/// Traffic runs while `change` is made, until `s` serves limits from
/// `base`; then no request may have failed.
async fn reload_under_traffic(s: &Sluice, base: u32, change: impl FnOnce()) {
    let stop = Arc::new(AtomicBool::new(false));
    let running = traffic(s, stop.clone()).await;
    change();
    let probe = CUSTOMERS - 1;
    let ok = tokio::task::block_in_place(|| {
        eventually(LOAD, || {
            served(s, probe) == Some(u64::from(limit(base, probe)))
        })
    });
    stop.store(true, Relaxed);
    let (answered, failed) = running.await.expect("traffic");
    assert!(
        ok,
        "the new limits were never served: {:?}",
        served(s, probe)
    );
    assert_eq!(failed, 0, "{failed} requests failed during the reload");
    assert!(answered > 0, "traffic ran");
    // The first customer has its new limit too: the set was swapped whole.
    assert_eq!(served(s, 0), Some(u64::from(limit(base, 0))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_rules_check_load_and_reload_from_a_file_under_traffic() {
    let dir = config_dir(&[("customers.yaml", &customers(100))]);
    let out = sluice_check(dir.path());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("saas: {CUSTOMERS} rules")
    );
    let s = Sluice::start_in(dir.path(), &[RELOAD_NICE[0], RELOAD_NICE[1]]);
    assert!(eventually(LOAD, || s.status() == "ready"), "{}", s.readyz());
    assert_eq!(served(&s, 42), Some(u64::from(limit(100, 42))));
    let file = dir.path().join("customers.yaml");
    reload_under_traffic(&s, 500, || {
        std::fs::write(&file, customers(500)).expect("rewrite");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_rules_load_and_reload_over_xds_under_traffic() {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .expect("addr");
    let ads = Ads::default();
    ads.push("v1", &[pushed(100)]);
    let _server = serve(ads.clone(), addr);
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            RELOAD_NICE[0],
            RELOAD_NICE[1],
        ],
    );
    assert!(
        eventually(LOAD, || served(&s, 42) == Some(u64::from(limit(100, 42)))),
        "{}",
        s.readyz()
    );
    reload_under_traffic(&s, 500, || ads.push("v2", &[pushed(500)])).await;
    assert!(eventually(LOAD, || ads.answer("v2").is_some()));
    assert!(ads.answer("v2").is_some_and(|a| a.error_detail.is_none()));
}
