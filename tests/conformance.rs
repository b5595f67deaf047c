//! The quota protocol as `rlqs.proto`'s comments write it, not as Envoy 1.40
//! happens to send it: a client that names its domain once, keeps
//! `time_elapsed` to the nanosecond and reports more often than once a
//! second. (The book's conformance table, docs/src/reference/conformance.md,
//! names the test that proves each field; the rate-limit service's fields are
//! proved in tests/service.rs, tests/refunds.rs and tests/shapes.rs.)

#[path = "conformance/agentgateway.rs"]
mod agentgateway;
mod common;

use std::time::Duration;

use common::Sluice;
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
"#;

/// One client's stream.
struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: Streaming<RateLimitQuotaResponse>,
}

impl Stream {
    async fn open(sluice: &Sluice) -> Stream {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", sluice.grpc))
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(8);
        let rx = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        Stream { tx, rx }
    }

    /// A report of one bucket: `allowed` requests over `elapsed`.
    async fn report(&self, domain: &str, key: &str, allowed: u64, elapsed: Duration) {
        let usage = BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("tier", "partner"), ("api_key", key)]
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            time_elapsed: Some(PbDuration {
                seconds: i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(elapsed.subsec_nanos()).unwrap_or(0),
            }),
            num_requests_allowed: allowed,
            num_requests_denied: 0,
        };
        self.tx
            .send(RateLimitQuotaUsageReports {
                domain: domain.into(),
                bucket_quota_usages: vec![usage],
            })
            .await
            .expect("send");
    }

    /// The next response's token bucket for `key`: tokens per fill, or
    /// `None` for a response that does not assign one to it.
    async fn next_fill(&mut self, key: &str) -> Option<u64> {
        let msg = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response within 10s")
            .unwrap_or_else(|s| panic!("the stream ended: {s}"))
            .expect("the stream is open");
        fill_of(&msg, key)
    }
}

/// rlqs.proto, `domain`: "should only be provided in the first report; all
/// subsequent messages on the same stream are considered to be in the same
/// domain". A client that does so keeps its stream and gets its buckets
/// assigned; a first report without one ends the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_names_its_domain_once() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let mut s = Stream::open(&sluice).await;
    let second = Duration::from_secs(1);
    s.report("api", "k1", 1, Duration::ZERO).await;
    assert_eq!(s.next_fill("k1").await, Some(100));
    // A new bucket, in a report that leaves the domain out.
    s.report("", "k2", 1, Duration::ZERO).await;
    assert_eq!(s.next_fill("k2").await, Some(100));
    s.report("", "k1", 3, second).await;
    assert_eq!(s.next_fill("k1").await, Some(100));

    let mut bare = Stream::open(&sluice).await;
    bare.report("", "k1", 1, Duration::ZERO).await;
    let err = tokio::time::timeout(Duration::from_secs(5), bare.rx.message())
        .await
        .expect("an answer within 5s")
        .expect_err("a first report without a domain ends the stream");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(err.message().contains("first usage report"), "{err}");
}

/// rlqs.proto, `time_elapsed`: the time since the bucket's last report, a
/// Duration to the nanosecond; a client may report a bucket more often than
/// once a second (its `reporting_interval`). Such reports measure demand: of
/// two clients on one bucket, the one reporting 40 requests a second in
/// quarter-second reports gets most of the budget, the idle one its floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_second_reports_with_nanoseconds_measure_demand() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let (mut busy, mut idle) = (Stream::open(&sluice).await, Stream::open(&sluice).await);
    busy.report("api", "k1", 0, Duration::ZERO).await;
    assert_eq!(busy.next_fill("k1").await, Some(100));
    idle.report("api", "k1", 0, Duration::ZERO).await;
    assert_eq!(idle.next_fill("k1").await, Some(50));
    // Demand not measured yet: an even split, pushed to the first client.
    assert_eq!(busy.next_fill("k1").await, Some(50));
    let quarter = Duration::from_millis(250);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut fill = None;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(quarter).await;
        busy.report("api", "k1", 10, quarter).await;
        idle.report("api", "k1", 0, quarter).await;
        // Take every answer queued so far; the last assignment counts.
        while let Ok(Ok(Some(msg))) =
            tokio::time::timeout(Duration::from_millis(1), busy.rx.message()).await
        {
            if let Some(f) = fill_of(&msg, "k1") {
                fill = Some(f);
            }
        }
        while let Ok(Ok(Some(_))) =
            tokio::time::timeout(Duration::from_millis(1), idle.rx.message()).await
        {}
        if fill.is_some_and(|f| f >= 80) {
            break;
        }
    }
    assert!(
        fill.is_some_and(|f| f >= 80),
        "the busy client's share of 100 per 10s: {fill:?} (an even split is 50)"
    );
}

/// The token bucket's tokens per fill `msg` assigns to `key`.
fn fill_of(msg: &RateLimitQuotaResponse, key: &str) -> Option<u64> {
    msg.bucket_action.iter().find_map(|a| {
        if a.bucket_id.as_ref()?.bucket.get("api_key")? != key {
            return None;
        }
        let Action::QuotaAssignmentAction(q) = a.bucket_action.as_ref()? else {
            return None;
        };
        match q.rate_limit_strategy.and_then(|s| s.strategy)? {
            Strategy::TokenBucket(b) => b.tokens_per_fill.map(|v| u64::from(v.value)),
            _ => None,
        }
    })
}
