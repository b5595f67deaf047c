//! Quota mode under hostile volume: one peer's silent streams and bucket
//! floods never lock another Envoy out, and silent streams end.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::{Sluice, bound, eventually, metric};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};

const RULES: &str = r#"
domain: api
descriptors:
  - key: api_key
    rate_limit: {window: 10s, requests_per_unit: 100}
"#;

fn channel(ip: [u8; 4], s: &Sluice) -> Channel {
    Endpoint::from_shared(format!("http://{}", s.grpc))
        .unwrap()
        .local_address(Some(IpAddr::from(ip)))
        .connect_lazy()
}

struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: Streaming<RateLimitQuotaResponse>,
}

async fn open(channel: &Channel) -> Result<Stream, tonic::Status> {
    let mut client = RateLimitQuotaServiceClient::new(channel.clone());
    let (tx, rx) = mpsc::channel(8);
    let rx = client
        .stream_rate_limit_quotas(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Stream { tx, rx })
}

fn usage(key: &str) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [("api_key".to_owned(), key.to_owned())].into(),
        }),
        time_elapsed: Some(PbDuration {
            seconds: 0,
            nanos: 0,
        }),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    }
}

impl Stream {
    async fn report(&self, keys: &[String]) {
        let _ = self
            .tx
            .send(RateLimitQuotaUsageReports {
                domain: "api".into(),
                bucket_quota_usages: keys.iter().map(|k| usage(k)).collect(),
            })
            .await;
    }

    /// Buckets assigned in the next answer.
    async fn assigned(&mut self) -> usize {
        let msg = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("an answer within 10s")
            .expect("stream ok")
            .expect("stream open");
        msg.bucket_action.len()
    }

    /// How the stream ended, within `within`.
    async fn ended(&mut self, within: Duration) -> Option<tonic::Status> {
        loop {
            match tokio::time::timeout(within, self.rx.message()).await {
                Err(_) => return None,
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => return Some(tonic::Status::ok("")),
                Ok(Err(status)) => return Some(status),
            }
        }
    }
}

/// One peer opens 100 streams that never send: it gets its share (8) and
/// no more; an Envoy from another address still gets its stream and its
/// assignment. The silent ones end at the first-report timeout (long
/// enough that none ends while the hundred are opened).
#[tokio::test]
async fn silent_quota_streams_take_one_peers_share_and_then_end() {
    let s = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--quota-max-streams-per-peer",
            "8",
            "--quota-first-report-timeout",
            "5s",
        ],
    );
    let attacker = channel([127, 0, 0, 2], &s);
    let mut silent = Vec::new();
    let mut refused = 0;
    for _ in 0..100 {
        match open(&attacker).await {
            Ok(st) => silent.push(st),
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!(silent.len(), 8);
    assert_eq!(refused, 92);
    let mut honest = open(&channel([127, 0, 0, 1], &s))
        .await
        .expect("honest stream");
    honest.report(&["honest".into()]).await;
    assert_eq!(honest.assigned().await, 1);
    // The silent streams end; the reporting one does not.
    for st in &mut silent {
        let end = st.ended(Duration::from_secs(10)).await.expect("ended");
        assert_eq!(end.code(), tonic::Code::DeadlineExceeded, "{end}");
    }
    assert!(bound(&s, "quota_silent_stream") >= 8.0);
    assert!(bound(&s, "quota_peer_streams") >= 92.0);
    honest.report(&["honest".into()]).await;
    assert_eq!(honest.assigned().await, 1);
    // Its share back, the attacker may open streams again.
    assert!(open(&attacker).await.is_ok());
}

/// A stream that reported once and then went quiet ends at
/// `--quota-stream-idle`.
#[tokio::test]
async fn a_stream_gone_quiet_ends() {
    let s = Sluice::start(&[("api.yaml", RULES)], &["--quota-stream-idle", "2s"]);
    let mut st = open(&channel([127, 0, 0, 1], &s)).await.expect("stream");
    st.report(&["a".into()]).await;
    assert_eq!(st.assigned().await, 1);
    let end = st.ended(Duration::from_secs(15)).await.expect("ended");
    assert_eq!(end.code(), tonic::Code::DeadlineExceeded, "{end}");
    assert!(eventually(Duration::from_secs(5), || {
        metric(&s.get("/metrics").1, "sluice_quota_streams") == Some(0.0)
    }));
}

/// Ten streams from one peer report 100 buckets each: the peer gets its
/// share of bucket places (50), and an Envoy elsewhere is still assigned.
#[tokio::test]
async fn one_peers_buckets_cannot_take_every_place() {
    let s = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--quota-max-buckets-per-peer",
            "50",
            "--quota-max-total-buckets",
            "100",
        ],
    );
    let attacker = channel([127, 0, 0, 2], &s);
    let mut placed = 0;
    let mut streams = Vec::new();
    for i in 0..10 {
        let mut st = open(&attacker).await.expect("stream");
        let keys: Vec<String> = (0..100).map(|j| format!("a{i}-{j}")).collect();
        st.report(&keys).await;
        placed += st.assigned_or_none().await;
        streams.push(st);
    }
    assert_eq!(placed, 50);
    let mut honest = open(&channel([127, 0, 0, 1], &s))
        .await
        .expect("honest stream");
    honest.report(&["honest".into()]).await;
    assert_eq!(honest.assigned().await, 1);
    let skipped = metric(
        &s.get("/metrics").1,
        "sluice_quota_reports_skipped_total{reason=\"peer_buckets\"}",
    )
    .unwrap_or(0.0);
    assert_eq!(skipped, 950.0);
}

impl Stream {
    /// Buckets assigned in the next answer, or 0 when none comes soon (a
    /// report whose every bucket was skipped may be answered with nothing).
    async fn assigned_or_none(&mut self) -> usize {
        match tokio::time::timeout(Duration::from_secs(2), self.rx.message()).await {
            Ok(Ok(Some(msg))) => msg.bucket_action.len(),
            _ => 0,
        }
    }
}
