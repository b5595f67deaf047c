//! The xDS scenario: the fleet's rules pushed by a management server (the
//! tests' own, on the real protos), shaped by an `--xds-overlay` as an
//! Envoy Gateway user would shape them, a reload that is a new version
//! pushed, and a nemesis that takes the server away and brings it back.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};
use tokio_util::sync::CancellationToken;

use super::common::ads::{Ads, serve};
use super::common::config_dir;
use super::fleet::{RULES, SHADOW};

/// `RateLimitUnit::SECOND`.
const SECOND: i32 = 1;

/// What the control plane cannot say, the overlay does: `c`'s 2 s window,
/// the refundable rule, the sliding window, the bucket and the rule that
/// counts after.
const OVERLAY: &str = "domain: chaos
descriptors:
  - key: c
    rate_limit: {window: 2s}
  - key: r
    rate_limit: {refundable: true}
  - key: w
    rate_limit: {algorithm: sliding_window}
  - key: k
    rate_limit: {algorithm: token_bucket}
  - key: f
    rate_limit: {count_after: true}
";

pub struct Xds {
    rt: tokio::runtime::Runtime,
    ads: Ads,
    addr: SocketAddr,
    serving: Mutex<Option<CancellationToken>>,
    version: AtomicU32,
    overlay: tempfile::TempDir,
}

impl Xds {
    /// A management server serving the rules with `a` at `a_limit`.
    pub fn start(a_limit: u32) -> Xds {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let addr: SocketAddr = format!("127.0.0.1:{}", super::common::redis::free_port())
            .parse()
            .expect("addr");
        let ads = Ads::default();
        ads.push("v1", &[configs(a_limit)]);
        let serving = {
            let _in = rt.enter();
            serve(ads.clone(), addr)
        };
        Xds {
            rt,
            ads,
            addr,
            serving: Mutex::new(Some(serving)),
            version: AtomicU32::new(1),
            overlay: config_dir(&[("shapes.yaml", OVERLAY)]),
        }
    }

    /// The serve flags that take the rules from this server.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--config-xds".into(),
            self.addr.to_string(),
            "--xds-overlay".into(),
            self.overlay.path().display().to_string(),
        ]
    }

    /// Pushes a new version with `a` at `a_limit`.
    pub fn push(&self, a_limit: u32) {
        let v = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        self.ads.push(&format!("v{v}"), &[configs(a_limit)]);
    }

    /// Takes the server away (its listener closed, every stream ended) or
    /// brings it back on the same address with the version it had.
    pub fn gone(&self, on: bool) {
        let mut serving = self.serving.lock().expect("serving");
        if on {
            if let Some(t) = serving.take() {
                t.cancel();
            }
            self.ads.0.lock().expect("ads").streams.clear();
        } else if serving.is_none() {
            let _in = self.rt.enter();
            *serving = Some(serve(self.ads.clone(), self.addr));
        }
    }
}

/// The fleet's rules as the control plane pushes them: every rule a limit
/// per second (the overlay gives `c` its 2 s), the shadow rule marked so.
fn configs(a_limit: u32) -> RateLimitConfig {
    let rule = |key: &str, limit: u32| RateLimitDescriptor {
        key: key.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: SECOND,
            requests_per_unit: limit,
            ..Default::default()
        }),
        shadow_mode: key == SHADOW,
        ..Default::default()
    };
    let mut descriptors: Vec<RateLimitDescriptor> = RULES
        .iter()
        .map(|(key, limit, _)| rule(key, if *key == "a" { a_limit } else { *limit }))
        .collect();
    descriptors.push(rule("flood", 100_000_000));
    RateLimitConfig {
        name: "chaos".into(),
        domain: "chaos".into(),
        descriptors,
    }
}
