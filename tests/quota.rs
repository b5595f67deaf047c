//! The RLQS service over real gRPC streams: assignments, pushes, bounds,
//! malformed reports, the failure policy and shutdown. (Real Envoys enforcing
//! the assignments: tests/quota_envoy.rs.)

mod common;

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
    // A report without a domain ends that stream only.
    bad.report("", vec![usage(PARTNER, 1, 0, 1)]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_one_instance_share_their_fleet_reads() {
    let redis = RedisServer::start();
    // A store timeout a starved Redis always meets: with 20 ms, a loaded
    // machine's Redis is rightly found slow, the breaker opens and its
    // probes (the same script) add calls this count is not about.
    let args = ["--redis-url", &redis.url(), "--redis-timeout", "1s"];
    let sluice = Sluice::start(&[("api.yaml", RULES)], &args);
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut s = open(&sluice).await.unwrap();
        s.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
        s.next().await;
        streams.push(s);
    }
    let calls = || redis.calls("evalsha") + redis.calls("eval");
    let before = calls();
    // The measurement is a span of time: three rebalance ticks of four
    // streams on one bucket. Each reading the store would be 12 calls.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = calls() - before;
    eprintln!("{made} store calls for 4 streams over 3 ticks");
    assert!(made <= 6, "{made} store calls for 4 streams over 3 ticks");
}

/// One client naming a thousand buckets must not turn its reports into a
/// thousand store calls a second: its own budget and the instance's bound
/// what quota mode asks of the store, and another Envoy still gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_buckets_costs_the_store_no_more_than_its_budgets() {
    let redis = RedisServer::start();
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--redis-url",
            &redis.url(),
            "--quota-stream-store-rate",
            "50",
            "--quota-store-rate",
            "80",
        ],
    );
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    let calls = || redis.calls_ok("evalsha") + redis.calls_ok("eval");
    let before = calls();
    let started = std::time::Instant::now();
    let keys: Vec<String> = (0..1000).map(|i| format!("flood-{i}")).collect();
    let mut flood = open(&sluice).await.unwrap();
    flood
        .report(
            "api",
            keys.iter()
                .map(|k| usage(&[("tier", "partner"), ("api_key", k)], 100, 0, 1))
                .collect(),
        )
        .await;
    let first = flood.next().await;
    // The stream saves five seconds of its 50 a second, the instance one
    // second of its 80: the instance's is what one report can spend.
    assert!(
        first.len() <= 80,
        "one report was answered with {} assignments, each a store call",
        first.len()
    );
    // An honest Envoy reporting meanwhile is still assigned its share.
    let mut honest = open(&sluice).await.unwrap();
    honest.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let mut got = HashMap::new();
    while !got.contains_key("k1") {
        got = honest.next().await;
    }
    assert!(got["k1"].contains("/10s"), "honest Envoy got {got:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = calls() - before;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{made} store calls in {seconds:.1} s");
    // The instance's budget: 80 a second, one second's worth saved up.
    assert!(
        (made as f64) <= 80.0 * (seconds + 1.0),
        "{made} store calls in {seconds:.1} s with --quota-store-rate 80"
    );
    let deferred = metric(
        &sluice.get("/metrics").1,
        "sluice_quota_store_calls_deferred_total",
    );
    assert!(
        deferred.is_some_and(|d| d > 0.0),
        "deferred calls are counted"
    );
}

/// Every bucket a stream holds costs memory and a little of each
/// rebalance; however many streams there are, the instance holds at most
/// `--quota-max-total-buckets`, and a stream that ends gives its back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_holds_no_more_buckets_than_its_cap() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &["--quota-max-total-buckets", "3"]);
    let partner = |k: &'static str| usage(&[("tier", "partner"), ("api_key", k)], 1, 0, 0);
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![partner("a1"), partner("a2")]).await;
    assert_eq!(a.next().await.len(), 2);
    let mut b = open(&sluice).await.unwrap();
    b.report("api", vec![partner("b1"), partner("b2")]).await;
    let got = b.next().await;
    assert!(got.contains_key("b1") && !got.contains_key("b2"), "{got:?}");
    let skipped = || {
        metric(
            &sluice.get("/metrics").1,
            "sluice_quota_reports_skipped_total{reason=\"too_many_buckets\"}",
        )
    };
    assert_eq!(skipped(), Some(1.0));
    // The first Envoy goes: its two places are free again.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // b1 is held, so every report is answered.
        b.report("api", vec![partner("b1"), partner("b2")]).await;
        if b.next().await.contains_key("b2") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "b2 never got a place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After a start, the instance learns what the fleet holds before it
/// assigns: two Envoys that report at once are told nothing until the
/// learning ends (so neither is handed the whole budget while it looks
/// alone), `/readyz` says so, and then each gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_instance_learns_the_fleet_before_it_assigns() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &["--quota-learning", "3s"]);
    let learning = sluice.readyz()["quota"]["learning_seconds_left"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(learning > 0.0, "{:?}", sluice.readyz());
    assert_eq!(
        metric(&sluice.get("/metrics").1, "sluice_quota_learning"),
        Some(1.0)
    );
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let mut b = open(&sluice).await.unwrap();
    b.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let early = tokio::time::timeout(Duration::from_millis(1500), a.rx.message()).await;
    assert!(early.is_err(), "assigned while learning: {early:?}");
    // Then both are sized for a fleet of two, never one.
    assert_eq!(a.next().await["k1"], "50/10s max 5");
    assert_eq!(b.next().await["k1"], "50/10s max 5");
    assert_eq!(
        sluice.readyz()["quota"]["learning_seconds_left"].as_f64(),
        Some(0.0)
    );
    assert_eq!(
        metric(&sluice.get("/metrics").1, "sluice_quota_learning"),
        Some(0.0)
    );
}
