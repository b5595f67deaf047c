//! The bodies of the fuzz targets (`fuzz/`), here so that the inputs kept in
//! `fuzz/regressions/` replay through exactly the same code in `make test`.

// Setup failures here are bugs in the harness, never reached by a request.
#![allow(clippy::panic, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;

use crate::config::{LiveRules, LoadOptions, load_texts};
use crate::metrics::Metrics;
use crate::service::{RateLimiter, Settings};
use crate::store::MemoryStore;

/// Rules that use every feature a request can reach.
const RULES: &str = "
domain: fuzz
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: w
    value: 'a*b*'
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2, name: wild}
  - key: s
    value: 'x*'
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: n
    descriptors:
      - key: m
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 1}
      - key: q
        quota_mode: true
        rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: wild}]}
  - key: email
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: u
    rate_limit: {unlimited: true}
";

/// Loads `data` as one rule file and, when it loads, matches a few
/// descriptors against every domain.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    assert!(
        crate::config::yaml::readings_agree(&text),
        "the event reading and serde's disagree on {text:?}"
    );
    let metrics = Metrics::default();
    let Ok(rules) = load_texts(
        vec![(PathBuf::from("fuzz.yaml"), text)],
        LoadOptions::default(),
        &metrics,
    ) else {
        return;
    };
    for (name, _) in rules.summary() {
        if let Some(domain) = rules.domain(&name) {
            for probe in [
                &[("a", "b")][..],
                &[("key", "value"), ("k", "")][..],
                &[][..],
            ] {
                let _ = domain.find(probe);
            }
        }
    }
    let _ = rules.dump();
}

fn limiter() -> &'static (tokio::runtime::Runtime, RateLimiter) {
    static LIMITER: OnceLock<(tokio::runtime::Runtime, RateLimiter)> = OnceLock::new();
    LIMITER.get_or_init(|| {
        let metrics = Arc::new(Metrics::default());
        let dir = std::env::temp_dir().join(format!("sluice-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        std::fs::write(dir.join("fuzz.yaml"), RULES).expect("the fuzz rules written");
        let live = LiveRules::load(&dir, LoadOptions::default(), metrics.clone())
            .unwrap_or_else(|e| panic!("the fuzz rules are valid: {e}"));
        let live = Arc::new(live);
        let limiter = RateLimiter::new(
            live,
            Arc::new(MemoryStore::default()),
            metrics,
            Settings::default(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("a runtime: {e}"));
        (runtime, limiter)
    })
}

/// Decodes `data` as a `RateLimitRequest` and decides it with the memory
/// store; any answer is fine, a panic is not.
pub fn request(data: &[u8]) {
    let Ok(mut req) = RateLimitRequest::decode(data) else {
        return;
    };
    // Most decoded messages name no domain or key sluice knows: aim half of
    // them at the rules, so the fuzzer explores matching and counting.
    if data.first().is_some_and(|b| b % 2 == 0) {
        req.domain = "fuzz".into();
        const KEYS: [&str; 7] = ["k", "w", "s", "n", "m", "q", "email"];
        for d in &mut req.descriptors {
            for (i, e) in d.entries.iter_mut().enumerate() {
                let pick = (e.key.len() + i) % KEYS.len();
                e.key = KEYS.get(pick).copied().unwrap_or("k").to_owned();
            }
        }
    }
    let (runtime, limiter) = limiter();
    let _ = runtime.block_on(limiter.handle(req));
}
