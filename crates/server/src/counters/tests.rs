use std::sync::Arc;

use super::*;
use crate::config::{LiveRules, LoadOptions};
use crate::service::{RateLimiter, Settings};
use crate::store::MemoryStore;

const RULE: &str =
    "domain: d\ndescriptors:\n  - key: KEY\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";

/// A reload between counting and explaining must not make the lookup
/// explain its counts by rules they were not found by.
#[tokio::test]
async fn a_lookup_explains_by_the_rules_it_counted_by() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.yaml");
    std::fs::write(&file, RULE.replace("KEY", "k")).unwrap();
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let live =
        Arc::new(LiveRules::load(dir.path(), LoadOptions::default(), metrics.clone()).unwrap());
    let store = Arc::new(MemoryStore::with_capacity(100));
    let limiter = RateLimiter::new(live.clone(), store.clone(), metrics, Settings::default());
    let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let req = crate::protojson::parse_request(body).unwrap();
    let peeked = limiter
        .peek(limiter.counters_request(req).unwrap())
        .await
        .unwrap();
    assert_eq!(peeked.descriptors[0].limits.len(), 1, "counted by rule k");
    std::fs::write(&file, RULE.replace("KEY", "other")).unwrap();
    live.reload("test").unwrap();
    let doc = document(store.as_ref(), &peeked);
    assert_eq!(doc["descriptors"][0]["match"]["rule"], "k", "{doc:#}");
}
