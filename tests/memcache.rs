//! memcached as the shared store (the reference's BACKEND_TYPE=memcache),
//! against a real memcached: exact counts across instances, every shape,
//! a counter someone else wrote, and the failure policy while it is down.

mod common;

use std::time::Duration;

use common::memcache::Memcached;
use common::{OK, OVER, Sluice, ask, eventually};

const RULES: &str = "domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: slide
    rate_limit: {unit: hour, requests_per_unit: 20, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 5}
";

fn start(m: &Memcached, extra: &[&str]) -> Sluice {
    let addr = m.addr();
    let mut args = vec![
        "--memcache-servers",
        addr.as_str(),
        "--redis-timeout",
        "200ms",
    ];
    args.extend_from_slice(extra);
    let s = Sluice::start(&[("api.yaml", RULES)], &args);
    assert!(
        eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
        "{:?}",
        s.readyz()
    );
    assert_eq!(s.readyz()["store"]["backend"], "memcache");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_count_exactly_in_one_memcached() {
    let m = Memcached::start();
    let (a, b) = (start(&m, &[]), start(&m, &[]));
    let clients = [a.client().await, b.client().await];
    // 200 concurrent requests over two instances for a limit of 50: the
    // reference's memcache backend increments after answering and lets
    // more through; here the 50 are exact.
    let ok = common::admitted(&clients, 200, "api", ("user", "alice")).await;
    assert_eq!(ok, 50);
    // No value in clear in memcached's keys.
    assert!(m.command("get alice\r\n").starts_with("END"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_windows_and_token_buckets_count_in_memcached() {
    let m = Memcached::start();
    let s = start(&m, &[]);
    let mut c = s.client().await;
    let mut ok = 0;
    for _ in 0..30 {
        ok += usize::from(ask(&mut c, "api", &[("slide", "s")]).await.overall_code == OK);
    }
    assert_eq!(ok, 20);
    let codes: Vec<i32> = {
        let mut v = Vec::new();
        for _ in 0..7 {
            v.push(ask(&mut c, "api", &[("bucket", "b")]).await.overall_code);
        }
        v
    };
    assert_eq!(codes, [OK, OK, OK, OK, OK, OVER, OVER]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_down_is_decided_by_the_policy_and_comes_back() {
    let mut m = Memcached::start();
    let s = start(&m, &["--store-failure", "deny"]);
    let mut c = s.client().await;
    assert_eq!(ask(&mut c, "api", &[("user", "u1")]).await.overall_code, OK);
    m.kill();
    let mut last = OK;
    for _ in 0..20 {
        last = ask(&mut c, "api", &[("user", "u2")]).await.overall_code;
    }
    assert_eq!(last, OVER, "deny while memcached is down");
    assert!(eventually(Duration::from_secs(5), || s.readyz()["status"]
        == "degraded"));
    m.restart();
    assert!(
        eventually(Duration::from_secs(20), || s.readyz()["status"] == "ready"),
        "back: {:?}",
        s.readyz()
    );
    assert_eq!(ask(&mut c, "api", &[("user", "u3")]).await.overall_code, OK);
}
