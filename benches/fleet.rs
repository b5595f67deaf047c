//! Quota mode at fleet scale: FLEET_ENVOYS (1000) RLQS streams, each
//! reporting FLEET_BUCKETS (10) buckets every 5 s as Envoy does, to one
//! sluice instance counting in a real redis-server. The buckets are shared:
//! every Envoy reports the same tenants, so each bucket's table holds the
//! whole fleet, each Envoy with its own demand. Streams come from 16
//! loopback addresses (each address a peer, under
//! `--quota-max-streams-per-peer`).
//!
//! Reported over FLEET_SECONDS (60) after every stream's first report: the
//! sluice process's CPU per bucket report, Redis commands per second, store
//! calls deferred by the budgets, sluice's memory, and how long a report
//! waits for its answer.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/proc.rs"]
mod proc;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::{Sluice, eventually, metric};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use proc::{cpu_seconds, env_or, fds, rss_kib};

const RULES: &str = "domain: api\ndescriptors:\n  - key: tier\n    value: partner\n    descriptors:\n      - key: api_key\n        rate_limit: {unit: minute, requests_per_unit: 600000}\n";
const PEERS: usize = 16;
const REPORT: Duration = Duration::from_secs(5);

fn report(buckets: usize, requests: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "api".into(),
        bucket_quota_usages: (0..buckets)
            .map(|b| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [
                        ("tier".to_owned(), "partner".to_owned()),
                        ("api_key".to_owned(), format!("tenant-{b}")),
                    ]
                    .into_iter()
                    .collect(),
                }),
                time_elapsed: Some(PbDuration {
                    seconds: 5,
                    nanos: 0,
                }),
                num_requests_allowed: requests,
                num_requests_denied: 0,
            })
            .collect(),
    }
}

/// What the streams saw: reports sent, answered, and the answers' waits.
#[derive(Default)]
struct Seen {
    reports: AtomicU64,
    answered: AtomicU64,
    wait_us: AtomicU64,
    worst_us: AtomicU64,
}

/// One Envoy: a report of `requests` per bucket every 5 s until `until`,
/// timing the first answer.
async fn envoy(
    mut c: RateLimitQuotaServiceClient<tonic::transport::Channel>,
    buckets: usize,
    requests: u64,
    phase: Duration,
    until: Instant,
    seen: Arc<Seen>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let Ok(resp) = c
        .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    else {
        return;
    };
    let mut answers = resp.into_inner();
    tokio::time::sleep(phase).await;
    while Instant::now() < until {
        let sent = Instant::now();
        if tx.send(report(buckets, requests)).await.is_err() {
            return;
        }
        seen.reports.fetch_add(1, Relaxed);
        if let Ok(Ok(Some(_))) = tokio::time::timeout(REPORT, answers.message()).await {
            let us = sent.elapsed().as_micros() as u64;
            seen.answered.fetch_add(1, Relaxed);
            seen.wait_us.fetch_add(us, Relaxed);
            seen.worst_us.fetch_max(us, Relaxed);
        }
        tokio::time::sleep_until((sent + REPORT).into()).await;
    }
}

fn main() {
    let envoys = env_or("FLEET_ENVOYS", 1000) as usize;
    let buckets = env_or("FLEET_BUCKETS", 10) as usize;
    let seconds = env_or("FLEET_SECONDS", 60);
    let redis = RedisServer::start();
    let sluice = start_sluice(&redis);
    let pid = sluice.pid();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let seen = Arc::new(Seen::default());
    let grpc: SocketAddr = sluice.grpc;
    let warm = Duration::from_secs(8);
    let start = Instant::now();
    let until = start + warm + Duration::from_secs(seconds);
    runtime.block_on(async {
        start_fleet(grpc, envoys, buckets, until, &seen);
        tokio::time::sleep(warm).await;
    });
    let (cpu0, calls0, reports0) = (
        cpu_seconds(pid),
        redis_calls(&redis),
        seen.reports.load(Relaxed),
    );
    let (answered0, wait0) = (seen.answered.load(Relaxed), seen.wait_us.load(Relaxed));
    let t0 = Instant::now();
    runtime.block_on(async move { tokio::time::sleep_until(until.into()).await });
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let calls = redis_calls(&redis) - calls0;
    let reports = seen.reports.load(Relaxed) - reports0;
    let answered = seen.answered.load(Relaxed) - answered0;
    let wait = seen.wait_us.load(Relaxed) - wait0;
    let text = sluice.get("/metrics").1;
    let deferred = metric(&text, "sluice_quota_store_calls_deferred_total").unwrap_or(0.0);
    let skipped: f64 = text
        .lines()
        .filter(|l| l.starts_with("sluice_quota_reports_skipped_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!(
        "{envoys} Envoys x {buckets} buckets, one sluice on Redis, {elapsed:.0} s measured:\n\
         - reports: {reports} ({:.0}/s, {:.0} bucket entries/s), {answered} answered, mean wait {:.1} ms, worst {:.1} ms\n\
         - sluice CPU: {:.2} cores, {:.1} µs per bucket entry\n\
         - Redis: {:.0} commands/s; store calls deferred by the budgets: {deferred}; entries skipped: {skipped}\n\
         - sluice RSS: {} MiB, descriptors {}",
        reports as f64 / elapsed,
        (reports * buckets as u64) as f64 / elapsed,
        wait as f64 / answered.max(1) as f64 / 1000.0,
        seen.worst_us.load(Relaxed) as f64 / 1000.0,
        cpu / elapsed,
        cpu * 1e6 / (reports * buckets as u64).max(1) as f64,
        calls as f64 / elapsed,
        rss_kib(pid) / 1024,
        fds(pid).0,
    );
}

/// `envoys` RLQS streams over the peers' channels, their reports spread over
/// the interval and their demands differing, until `until`.
fn start_fleet(grpc: SocketAddr, envoys: usize, buckets: usize, until: Instant, seen: &Arc<Seen>) {
    let channels: Vec<_> = (0..PEERS)
        .map(|p| {
            tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
                .expect("endpoint")
                .local_address(Some(IpAddr::from([127, 0, 1, 10 + p as u8])))
                .connect_lazy()
        })
        .collect();
    for i in 0..envoys {
        let c = RateLimitQuotaServiceClient::new(channels[i % PEERS].clone());
        // Reports spread over the interval, as a fleet's are.
        let phase = REPORT * (i as u32) / (envoys as u32);
        // Demands differ, as in a real fleet (5 to 44 requests in 5 s), so
        // every split sorts a thousand different claims.
        let requests = 5 + (i as u64 * 7) % 40;
        tokio::spawn(envoy(c, buckets, requests, phase, until, seen.clone()));
    }
}

/// One sluice on `redis`, ready, with room for the fleet's streams.
fn start_sluice(redis: &RedisServer) -> Sluice {
    let url = redis.url();
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--redis-url",
            &url,
            "--redis-timeout",
            "200ms",
            "--quota-max-streams",
            "2048",
        ],
    );
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    sluice
}

/// Every command Redis has run, from `INFO commandstats`.
fn redis_calls(redis: &RedisServer) -> u64 {
    redis
        .cli(&["info", "commandstats"])
        .lines()
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}
