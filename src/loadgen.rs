//! `sluice bench`: a load generator for any Envoy rate-limit service. It sends
//! `ShouldRateLimit` calls built from descriptor templates, closed-loop (as
//! fast as `concurrency` allows) or open-loop at a fixed rate, and reports
//! throughput, latency percentiles and the answers.
//!
//! At a fixed rate, latency is measured from when a request was due, not when
//! it was sent, so a stalled server shows up in the percentiles instead of
//! silently lowering the rate (no coordinated omission).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

/// One descriptor template: `key=value` entries; `{n}` in a value becomes the
/// request's value index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<(String, String)>);

/// Why a template or a run is invalid.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("descriptor template '{0}': expected key=value[,key=value...]")]
    Template(String),
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        source: tonic::transport::Error,
    },
}

impl std::str::FromStr for Template {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let entries = s
            .split(',')
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                _ => Err(BenchError::Template(s.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Template(entries))
    }
}

/// What to send, how hard, for how long.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// `host:port` of the service.
    pub target: String,
    pub domain: String,
    pub descriptors: Vec<Template>,
    /// Distinct values of `{n}`, taken in turn (request `i` uses `i % keys`).
    pub keys: u64,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    pub connections: usize,
    /// Stop after this long...
    pub duration: Duration,
    /// ...or after this many requests, whichever comes first.
    pub requests: Option<u64>,
    /// Requests per second, open loop; `None` sends as fast as it can.
    pub rate: Option<f64>,
}

/// One request as the run saw it: when it was due (or sent, closed loop)
/// and how long its answer took, both in microseconds from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub due_us: u32,
    pub latency_us: u32,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub elapsed: Duration,
    pub ok: u64,
    pub over_limit: u64,
    pub errors: u64,
    /// Sorted latencies in microseconds.
    latencies: Vec<u32>,
    /// Every request in the order it was due, for a reader that sets
    /// latencies beside what else happened in the run (`make bench` sets
    /// them beside reloads).
    samples: Vec<Sample>,
}

impl Report {
    /// Every request, in the order it was due.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn requests(&self) -> u64 {
        self.ok + self.over_limit + self.errors
    }

    pub fn rate(&self) -> f64 {
        self.requests() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency below which `q` (0..=1) of the requests finished.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank =
            ((self.latencies.len() as f64 * q).ceil() as usize).clamp(1, self.latencies.len());
        Duration::from_micros(u64::from(
            self.latencies.get(rank - 1).copied().unwrap_or_default(),
        ))
    }

    /// One line of JSON, for scripts (`make bench` reads it).
    pub fn json(&self) -> String {
        let us = |q: f64| self.percentile(q).as_micros();
        format!(
            r#"{{"requests":{},"seconds":{:.3},"rps":{:.1},"ok":{},"over_limit":{},"errors":{},"p50_us":{},"p90_us":{},"p99_us":{},"p999_us":{},"max_us":{}}}"#,
            self.requests(),
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.ok,
            self.over_limit,
            self.errors,
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            us(1.0)
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |q: f64| self.percentile(q).as_secs_f64() * 1e3;
        writeln!(
            f,
            "requests   {} in {:.2}s: {:.0} req/s",
            self.requests(),
            self.elapsed.as_secs_f64(),
            self.rate()
        )?;
        writeln!(
            f,
            "latency    p50 {:.3}ms  p90 {:.3}ms  p99 {:.3}ms  p99.9 {:.3}ms  max {:.3}ms",
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ms(0.999),
            ms(1.0)
        )?;
        write!(
            f,
            "answers    ok {}  over_limit {}  errors {}",
            self.ok, self.over_limit, self.errors
        )
    }
}

fn request(plan: &LoadPlan, n: u64) -> RateLimitRequest {
    let value = n.to_string();
    RateLimitRequest {
        domain: plan.domain.clone(),
        descriptors: plan
            .descriptors
            .iter()
            .map(|t| RateLimitDescriptor {
                entries: t
                    .0
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.clone(),
                        value: v.replace("{n}", &value),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

#[derive(Default)]
struct Outcomes {
    ok: u64,
    over_limit: u64,
    errors: u64,
    samples: Vec<Sample>,
}

impl Outcomes {
    fn record(
        &mut self,
        started: Instant,
        since: Instant,
        answer: Result<
            tonic::Response<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse>,
            tonic::Status,
        >,
    ) {
        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        self.samples.push(Sample {
            due_us: micros(since.saturating_duration_since(started)),
            latency_us: micros(since.elapsed()),
        });
        match answer.map(|r| r.into_inner().overall_code) {
            Ok(c) if c == Code::OverLimit as i32 => self.over_limit += 1,
            Ok(_) => self.ok += 1,
            Err(_) => self.errors += 1,
        }
    }

    /// The report of a run that took `elapsed`: samples in due order,
    /// latencies sorted for the percentiles.
    fn report(mut self, elapsed: Duration) -> Report {
        self.samples.sort_unstable_by_key(|s| s.due_us);
        let mut latencies: Vec<u32> = self.samples.iter().map(|s| s.latency_us).collect();
        latencies.sort_unstable();
        Report {
            elapsed,
            ok: self.ok,
            over_limit: self.over_limit,
            errors: self.errors,
            latencies,
            samples: self.samples,
        }
    }
}

/// Runs the plan and reports what it saw.
pub async fn run(plan: LoadPlan) -> Result<Report, BenchError> {
    let endpoint = Endpoint::from_shared(format!("http://{}", plan.target)).map_err(|source| {
        BenchError::Connect {
            target: plan.target.clone(),
            source,
        }
    })?;
    let mut channels = Vec::with_capacity(plan.connections.max(1));
    for _ in 0..plan.connections.max(1) {
        let channel = endpoint
            .clone()
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|source| BenchError::Connect {
                target: plan.target.clone(),
                source,
            })?;
        channels.push(channel);
    }
    let plan = Arc::new(plan);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut total = Outcomes::default();
    let workers: Vec<_> = match plan.rate {
        Some(rate) => {
            total = open_loop(plan.clone(), channels, rate, started).await;
            Vec::new()
        }
        None => channels
            .iter()
            .cycle()
            .take(plan.concurrency.max(1))
            .map(|channel| {
                let client = RateLimitServiceClient::new(channel.clone());
                tokio::spawn(worker(client, plan.clone(), next.clone(), started))
            })
            .collect(),
    };
    for w in workers {
        // A worker that panicked lost its tally; the others still count.
        if let Ok(t) = w.await {
            total.ok += t.ok;
            total.over_limit += t.over_limit;
            total.errors += t.errors;
            total.samples.extend(t.samples);
        }
    }
    Ok(total.report(started.elapsed()))
}

async fn worker(
    mut client: RateLimitServiceClient<Channel>,
    plan: Arc<LoadPlan>,
    next: Arc<AtomicU64>,
    started: Instant,
) -> Outcomes {
    let mut tally = Outcomes::default();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if plan.requests.is_some_and(|n| i >= n) || started.elapsed() >= plan.duration {
            return tally;
        }
        let sent = Instant::now();
        let answer = client
            .should_rate_limit(request(&plan, i % plan.keys.max(1)))
            .await;
        tally.record(started, sent, answer);
    }
}

/// Open loop: a ticker thread releases request `i` at `i / rate` seconds
/// (an OS sleep is precise to tens of microseconds, the async timer only to a
/// millisecond, which would send the load in bursts), and each request runs
/// as its own task, at most `concurrency` at once.
async fn open_loop(
    plan: Arc<LoadPlan>,
    channels: Vec<Channel>,
    rate: f64,
    started: Instant,
) -> Outcomes {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let (duration, limit) = (plan.duration, plan.requests);
    std::thread::spawn(move || {
        for i in 0.. {
            let due = started + Duration::from_secs_f64(i as f64 / rate);
            if due >= started + duration || limit.is_some_and(|n| i >= n) {
                return;
            }
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if tx.send((i, due)).is_err() {
                return;
            }
        }
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(plan.concurrency.max(1)));
    let tally = Arc::new(std::sync::Mutex::new(Outcomes::default()));
    let mut tasks = Vec::new();
    let mut ring = channels.iter().cycle();
    while let Some((i, due)) = rx.recv().await {
        // Waiting here means every slot is busy: the latency, counted from
        // when the request was due, includes that wait.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let Some(channel) = ring.next() else {
            break;
        };
        let mut client = RateLimitServiceClient::new(channel.clone());
        let (plan, tally) = (plan.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let answer = client
                .should_rate_limit(request(&plan, i % plan.keys.max(1)))
                .await;
            if let Ok(mut t) = tally.lock() {
                t.record(started, due, answer);
            }
            drop(slot);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Arc::try_unwrap(tally)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "loadgen_tests.rs"]
mod tests;
