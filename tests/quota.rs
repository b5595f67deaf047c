//! The RLQS service over real gRPC streams: assignments, pushes, bounds,
//! malformed reports, the failure policy and shutdown. (Real Envoys enforcing
//! the assignments: tests/quota_envoy.rs.)

mod common;
#[path = "quota/fleet.rs"]
mod fleet;

use std::collections::HashMap;
use std::time::Duration;

use common::redis::RedisServer;
use common::{Sluice, eventually, metric};
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const RULES: &str = r#"
domain: api
descriptors:
  - key: tier
    value: partner
    descriptors:
      - key: api_key
        rate_limit: {window: 10s, requests_per_unit: 100}
  - key: tier
    value: trial
    descriptors:
      - key: api_key
        shadow_mode: true
        rate_limit: {window: 10s, requests_per_unit: 10}
  - key: tier
    value: internal
    rate_limit: {unlimited: true}
"#;

/// One Envoy's side of a stream.
struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: Streaming<RateLimitQuotaResponse>,
}

async fn open(sluice: &Sluice) -> Result<Stream, tonic::Status> {
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    let (tx, rx) = mpsc::channel(8);
    let rx = client
        .stream_rate_limit_quotas(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Stream { tx, rx })
}

fn id(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn usage(entries: &[(&str, &str)], allowed: u64, denied: u64, secs: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id(entries)),
        time_elapsed: Some(PbDuration {
            seconds: secs,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// What one bucket was told, in short: `tpf/interval max` for a token
/// bucket, `allow` / `deny` for blanket rules, `abandon`.
fn describe(action: &Action) -> String {
    match action {
        Action::AbandonAction(_) => "abandon".into(),
        Action::QuotaAssignmentAction(a) => match a.rate_limit_strategy.and_then(|s| s.strategy) {
            Some(Strategy::TokenBucket(b)) => format!(
                "{}/{}s max {}",
                b.tokens_per_fill.map_or(0, |v| v.value),
                b.fill_interval.map_or(0, |d| d.seconds),
                b.max_tokens
            ),
            Some(Strategy::BlanketRule(0)) => "allow".into(),
            Some(Strategy::BlanketRule(_)) => "deny".into(),
            other => format!("{other:?}"),
        },
    }
}

impl Stream {
    async fn report(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        self.tx
            .send(RateLimitQuotaUsageReports {
                domain: domain.into(),
                bucket_quota_usages: usages,
            })
            .await
            .expect("send");
    }

    /// The status the stream ends with, skipping responses still queued.
    async fn error(&mut self) -> tonic::Status {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.rx.message())
                .await
                .expect("an answer within 5s")
            {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended without an error"),
                Err(status) => return status,
            }
        }
    }

    /// The next response, by api_key (or `tier` when there is none).
    async fn next(&mut self) -> HashMap<String, String> {
        let msg = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response within 10s")
            .expect("stream ok")
            .expect("stream open");
        msg.bucket_action
            .iter()
            .map(|a| {
                let b = &a.bucket_id.as_ref().expect("bucket id").bucket;
                let name = b
                    .get("api_key")
                    .or(b.get("tier"))
                    .cloned()
                    .unwrap_or_default();
                (name, describe(a.bucket_action.as_ref().expect("action")))
            })
            .collect()
    }
}

const PARTNER: &[(&str, &str)] = &[("tier", "partner"), ("api_key", "k1")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_map_to_rules_and_open_ones_are_allowed() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let mut s = open(&sluice).await.unwrap();
    s.report(
        "api",
        vec![
            usage(PARTNER, 1, 0, 0),
            usage(&[("tier", "internal")], 1, 0, 0),
            usage(&[("tier", "nobody")], 1, 0, 0),
            usage(&[("tier", "trial"), ("api_key", "t1")], 1, 0, 0),
        ],
    )
    .await;
    let got = s.next().await;
    // 100 per 10s, one Envoy: all of it; a burst of a tenth of it (10).
    assert_eq!(got["k1"], "100/10s max 10");
    assert_eq!(got["internal"], "allow");
    assert_eq!(got["nobody"], "allow");
    // Shadow mode: allowed, and what the share would deny is counted.
    assert_eq!(got["t1"], "allow");
    s.report(
        "api",
        vec![usage(&[("tier", "trial"), ("api_key", "t1")], 50, 0, 5)],
    )
    .await;
    let shadowed = || {
        metric(
            &sluice.get("/metrics").1,
            "sluice_rule_shadow_mode_total{domain=\"api\",rule=\"tier_trial.api_key\"}",
        )
    };
    assert!(
        eventually(Duration::from_secs(5), || shadowed()
            .is_some_and(|v| v >= 45.0)),
        "{:?}\n{}",
        shadowed(),
        sluice.get("/metrics").1
    );
    // A bucket id from another domain on this stream is refused.
    s.report("other", vec![usage(PARTNER, 1, 0, 1)]).await;
    let err = s.error().await;
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_envoy_halves_the_first_ones_share_without_a_report() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    assert_eq!(a.next().await["k1"], "100/10s max 10");
    let mut b = open(&sluice).await.unwrap();
    b.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    assert_eq!(b.next().await["k1"], "50/10s max 5");
    // Pushed to the first Envoy by the rebalance timer.
    assert_eq!(a.next().await["k1"], "50/10s max 5");
    // The second one leaves: the first gets everything back.
    drop(b);
    assert_eq!(a.next().await["k1"], "100/10s max 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reports_are_skipped_and_counted_and_break_nothing_else() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &["--quota-max-buckets", "2"]);
    let mut good = open(&sluice).await.unwrap();
    let mut bad = open(&sluice).await.unwrap();
    let long = "x".repeat(2000);
    bad.report(
        "api",
        vec![
            BucketQuotaUsage {
                bucket_id: None,
                ..usage(PARTNER, 1, 0, 1)
            },
            usage(&[("tier", "partner"), ("api_key", &long)], 1, 0, 1),
            usage(
                &[
                    ("tier", "partner"),
                    ("api_key", "x"),
                    ("a", &long[..1000]),
                    ("b", &long[..1000]),
                    ("c", &long[..1000]),
                    ("d", &long[..1000]),
                    ("e", &long[..1000]),
                ],
                1,
                0,
                1,
            ),
            usage(
                &[("tier", "partner"), ("api_key", "absurd")],
                u64::MAX,
                u64::MAX,
                1,
            ),
            usage(&[("tier", "partner"), ("api_key", "b1")], 1, 0, 0),
            usage(&[("tier", "partner"), ("api_key", "b2")], 1, 0, 0),
            usage(&[("tier", "partner"), ("api_key", "b3")], 1, 0, 0),
        ],
    )
    .await;
    let got = bad.next().await;
    assert_eq!(got.len(), 2, "only the two buckets within bounds: {got:?}");
    let text = sluice.get("/metrics").1;
    for (reason, n) in [
        ("no_bucket_id", 1.0),
        ("oversized", 2.0),
        ("bad_counts", 1.0),
        ("too_many_buckets", 1.0),
    ] {
        let series = format!("sluice_quota_reports_skipped_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(&text, &series), Some(n), "{series}");
    }
    // A report naming another domain ends that stream only (one without
    // a domain is in the stream's own: tests/conformance.rs).
    bad.report("other", vec![usage(PARTNER, 1, 0, 1)]).await;
    let err = bad.error().await;
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    good.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    assert_eq!(good.next().await["k1"], "100/10s max 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_and_idle_buckets_abandoned() {
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &["--quota-max-streams", "1", "--quota-abandon-after", "1s"],
    );
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 0, 0, 0)]).await;
    assert_eq!(a.next().await["k1"], "100/10s max 10");
    let refused = match open(&sluice).await {
        Ok(mut s) => s.rx.message().await.expect_err("refused"),
        Err(status) => status,
    };
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // No requests for a second: the bucket is abandoned.
    assert_eq!(a.next().await["k1"], "abandon");
    assert!(eventually(Duration::from_secs(5), || {
        sluice.readyz()["quota"]["streams"] == 1
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_follows_the_failure_policy_and_says_so() {
    let mut redis = RedisServer::start();
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--redis-url",
            &redis.url(),
            "--redis-timeout",
            "100ms",
            "--store-failure",
            "deny",
        ],
    );
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    assert_eq!(a.next().await["k1"], "100/10s max 10");
    // The fleet lives in Redis, under a digest: no key in clear.
    let keys = redis.cli(&["KEYS", "*quota*"]);
    assert!(
        keys.contains("sluice:quota:api:") && !keys.contains("k1"),
        "{keys}"
    );
    redis.kill();
    // Reports keep coming; once the store is down, the policy answers.
    let mut last = String::new();
    for _ in 0..20 {
        a.report("api", vec![usage(PARTNER, 5, 0, 1)]).await;
        last = a.next().await["k1"].clone();
        if last == "deny" {
            break;
        }
    }
    assert_eq!(last, "deny");
    // The rebalance timer keeps asking the store: the breaker trips.
    assert!(eventually(Duration::from_secs(10), || {
        let ready = sluice.readyz();
        ready["status"] == "degraded" && ready["quota"]["shares_from"] == "deny-all"
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_renews_assignments_then_ends_the_stream() {
    let mut sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    assert_eq!(a.next().await["k1"], "100/10s max 10");
    sluice.signal("TERM");
    assert_eq!(a.next().await["k1"], "100/10s max 10");
    let end = tokio::time::timeout(Duration::from_secs(10), a.rx.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    assert!(sluice.wait(Duration::from_secs(10)).success());
}

#[test]
fn check_names_rules_a_bucket_could_match_two_ways() {
    let dir = common::config_dir(&[(
        "api.yaml",
        "domain: api\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    descriptors:\n      - key: a\n        rate_limit: {unit: second, requests_per_unit: 2}\n",
    )]);
    let run = |quota: bool| {
        let mut cmd = std::process::Command::new(common::sluice_bin());
        cmd.arg("check").arg(dir.path());
        if quota {
            cmd.arg("--quota");
        }
        cmd.output().expect("sluice check")
    };
    let lenient = run(false);
    assert!(lenient.status.success());
    let strict = run(true);
    assert!(!strict.status.success());
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(
        err.contains("error: quota mode: domain 'api': rules 'a.b' and 'b.a'"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&lenient.stderr).contains("warning: quota mode"));
}
