//! Faults on the real binary: a SIGTERM under load leaves no decided request
//! unanswered.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;

const RULES: &str = "
domain: load
descriptors:
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 1000000000}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_decided_request() {
    let mut s = Sluice::start(&[("load.yaml", RULES)], &["--shutdown-grace", "5s"]);
    let answered = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(s.client().await);
    }
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let mut c = clients[t % clients.len()].clone();
            let answered = answered.clone();
            tokio::spawn(async move {
                // Until the server stops taking requests: then every call
                // fails, and this client stops.
                while c
                    .should_rate_limit(request("load", vec![descriptor(&[("ip", "10.0.0.1")])]))
                    .await
                    .is_ok()
                {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let seen = answered.clone();
    assert!(
        tokio::task::spawn_blocking(move || eventually(Duration::from_secs(10), || seen
            .load(Ordering::Relaxed)
            > 2000))
        .await
        .unwrap(),
        "load never got going"
    );
    s.signal("TERM");
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("a client hung after shutdown")
            .unwrap();
    }
    assert!(s.wait(Duration::from_secs(15)).success());
    let logs = s.logs.lock().unwrap().clone();
    let stopped = logs
        .iter()
        .find(|l| l.contains("sluice stopped"))
        .expect("a stop line");
    let v: serde_json::Value = serde_json::from_str(stopped).unwrap();
    let decided = v["fields"]["answered"].as_u64().expect("answered count");
    assert_eq!(
        answered.load(Ordering::Relaxed),
        decided,
        "every request sluice decided reached its client"
    );
}
