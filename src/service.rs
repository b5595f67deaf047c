//! The rate-limit service: resolves a request's descriptors against the live
//! rules, counts them in one store call, and turns the decision into Envoy's
//! response. The gRPC handler and `/json` both go through [`RateLimiter::decide`].

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, Struct};
use tonic::Status;

use crate::config::{Domain, LimitDef, LiveRules, Rule};
use crate::limiter::{self, Algorithm, Counted, Now, Period, Tally, Window};
use crate::metrics::{Metrics, Outcome, RuleStats};
use crate::privacy::Privacy;
use crate::request::{Limits, Request, RequestError};
use crate::store::{CounterKey, Increment, KeySpace, Store, StoreError, expect_counts};

mod metadata;

/// Service-wide switches.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Answer OK whatever the limits say (statuses still tell the truth).
    pub global_shadow: bool,
    /// Fill `dynamic_metadata` as the reference's `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
    /// Which entries are email addresses, hashed at the edge.
    pub privacy: Privacy,
    /// The most one request may carry.
    pub limits: Limits,
}

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ServiceError> for Status {
    /// The one place errors become gRPC statuses. Store failures are
    /// UNAVAILABLE so that Envoy's `failure_mode_deny` decides, never a 429.
    fn from(e: ServiceError) -> Status {
        match e {
            ServiceError::Request(e) => Status::invalid_argument(e.to_string()),
            ServiceError::Store(e) => Status::unavailable(e.to_string()),
        }
    }
}

/// Cheap to clone; shared by the gRPC and admin servers.
#[derive(Clone)]
pub struct RateLimiter {
    rules: Arc<LiveRules>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    settings: Settings,
}

/// A descriptor that will be counted: a configured rule, or Envoy's override.
struct Counting<'a> {
    requests_per_unit: u32,
    period: Period,
    algorithm: Algorithm,
    /// `None` for a per-request override, which has no rule behind it.
    rule: Option<&'a Rule>,
    stats: &'a Arc<RuleStats>,
    /// The stats path when it carries runtime values (`detailed_metric`).
    metric_path: Option<String>,
    key: CounterKey,
}

/// How one descriptor resolved against the rules.
enum Resolved<'a> {
    NoLimit,
    Unlimited,
    Counted(Counting<'a>),
}

impl Counting<'_> {
    fn increment(&self, hits: u64, now: Now) -> Increment {
        Increment {
            key: self.key.clone(),
            hits,
            limit: self.requests_per_unit,
            window: Window::containing(self.period, now),
            algorithm: self.algorithm,
        }
    }

    fn decide(&self, hits: u64, tally: Tally, now_ms: u64) -> limiter::Status {
        let now = Now(now_ms / 1000);
        let window = Window::containing(self.period, now);
        limiter::status(
            &Counted {
                requests_per_unit: self.requests_per_unit,
                window,
                algorithm: self.algorithm,
                hits,
                tally,
                elapsed_ms: now_ms.saturating_sub(window.start.0.saturating_mul(1000)),
                shadow: self.rule.is_some_and(|r| r.shadow_mode),
                quota: self.rule.is_some_and(|r| r.quota_mode),
            },
            now,
        )
    }

    fn status(&self, s: &limiter::Status) -> DescriptorStatus {
        DescriptorStatus {
            code: if s.over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit: Some(RateLimit {
                name: self
                    .rule
                    .and_then(|r| r.name.as_deref())
                    .unwrap_or_default()
                    .to_owned(),
                // Envoy can only name second to year: other windows are
                // reported as a rate in the longest unit that fits them.
                requests_per_unit: self.period.reported_limit(self.requests_per_unit),
                unit: self.period.reported_unit().proto(),
            }),
            limit_remaining: s.remaining,
            duration_until_reset: Some(PbDuration {
                seconds: i64::try_from(s.reset_seconds).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            quota: None,
        }
    }
}

/// Matches every descriptor, then drops the limits that another matched
/// limit `replaces`: those answer OK with no limit and are not counted.
fn resolve<'a>(domain: &'a Domain, req: &Request) -> Vec<Resolved<'a>> {
    let mut replaced: Vec<&str> = Vec::new();
    let mut resolved: Vec<Resolved<'a>> = req
        .descriptors
        .iter()
        .map(|d| {
            let entries = || d.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            if let Some(o) = d.limit {
                return Resolved::Counted(Counting {
                    requests_per_unit: o.requests_per_unit,
                    period: Period::Unit(o.unit),
                    algorithm: Algorithm::FixedWindow,
                    rule: None,
                    stats: &domain.override_stats,
                    metric_path: None,
                    key: CounterKey::new(&req.domain, o.unit, entries()),
                });
            }
            let Some(m) = domain.find(&d.entries) else {
                return Resolved::NoLimit;
            };
            let rule: &'a Rule = m.rule;
            replaced.extend(rule.replaces.iter().map(|r| &**r));
            let LimitDef::Limited {
                period,
                requests_per_unit,
                algorithm,
            } = rule.limit
            else {
                return Resolved::Unlimited;
            };
            // share_threshold: the configured pattern stands for the value.
            let values = entries().enumerate().map(|(i, (k, v))| {
                let shared = m.shared.iter().find(|(j, _)| *j == i).map(|(_, p)| *p);
                (k, shared.unwrap_or(v))
            });
            Resolved::Counted(Counting {
                requests_per_unit,
                period,
                algorithm,
                rule: Some(rule),
                stats: &rule.stats,
                key: CounterKey::new(&req.domain, KeySpace { period, algorithm }, values),
                metric_path: m.metric_path,
            })
        })
        .collect();
    for r in resolved.iter_mut() {
        if let Resolved::Counted(Counting {
            rule: Some(rule), ..
        }) = r
            && rule.name.as_deref().is_some_and(|n| replaced.contains(&n))
        {
            *r = Resolved::NoLimit;
        }
    }
    resolved
}

impl RateLimiter {
    pub fn new(
        rules: Arc<LiveRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: Settings,
    ) -> Self {
        RateLimiter {
            rules,
            store,
            metrics,
            settings,
        }
    }

    pub fn rules(&self) -> &Arc<LiveRules> {
        &self.rules
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Converts, decides and records one protobuf request.
    pub async fn handle(&self, req: RateLimitRequest) -> Result<RateLimitResponse, ServiceError> {
        let started = Instant::now();
        let result = match Request::parse(req, &self.settings.limits) {
            Ok(mut req) => {
                req.protect(&self.settings.privacy);
                self.decide(req).await
            }
            Err(e) => Err(e.into()),
        };
        let outcome = match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => Outcome::OverLimit,
            Ok(_) => Outcome::Ok,
            Err(_) => Outcome::Invalid,
        };
        self.metrics.request(outcome, started.elapsed());
        result
    }

    /// Decides a validated request.
    pub async fn decide(&self, req: Request) -> Result<RateLimitResponse, ServiceError> {
        let now_ms = Now::wall_ms();
        let now = Now(now_ms / 1000);
        let loaded = self.rules.snapshot();
        let Some(domain) = loaded.rules.domain(&req.domain) else {
            self.metrics.domain_not_found();
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: vec![ok_status(); req.descriptors.len()],
                ..Default::default()
            });
        };
        let resolved = resolve(domain, &req);
        let increments: Vec<Increment> = resolved
            .iter()
            .zip(&req.descriptors)
            .filter_map(|(r, d)| match r {
                Resolved::Counted(c) => Some(c.increment(d.hits, now)),
                _ => None,
            })
            .collect();
        let counts = if increments.is_empty() {
            Vec::new()
        } else {
            // One count per increment, or an error: a missing count must
            // never read as zero and admit.
            expect_counts(self.store.increment(&increments).await?, increments.len())?
        };

        let mut counts = counts.into_iter();
        let mut statuses = Vec::with_capacity(resolved.len());
        let mut decided = Vec::with_capacity(increments.len());
        let mut passed_metadata: Vec<&Struct> = Vec::new();
        for (r, d) in resolved.iter().zip(&req.descriptors) {
            let c = match r {
                Resolved::NoLimit => {
                    statuses.push(ok_status());
                    continue;
                }
                Resolved::Unlimited => {
                    statuses.push(DescriptorStatus {
                        limit_remaining: u32::MAX,
                        ..ok_status()
                    });
                    continue;
                }
                Resolved::Counted(c) => c,
            };
            let tally = counts.next().unwrap_or(Tally::Count(u64::MAX));
            let s = c.decide(d.hits, tally, now_ms);
            match (&c.metric_path, c.rule) {
                (Some(path), Some(rule)) => self
                    .metrics
                    .detailed(&rule.domain, path, c.stats)
                    .add(&s.stats),
                _ => c.stats.add(&s.stats),
            }
            // As the reference: the metadata of every counted descriptor whose
            // status is not OVER_LIMIT (a shadowed one passes).
            if !s.over
                && let Some(md) = c.rule.and_then(|r| r.metadata.as_ref())
            {
                passed_metadata.push(md);
            }
            statuses.push(c.status(&s));
            decided.push(s);
        }
        let summary = limiter::summarize(&decided, self.settings.global_shadow);
        let mut response = RateLimitResponse {
            overall_code: if summary.over {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            statuses,
            ..Default::default()
        };
        if let Some(wait) = summary.retry_after {
            response.response_headers_to_add.push(HeaderValue {
                key: "Retry-After".into(),
                value: wait.to_string(),
                raw_value: Vec::new(),
            });
        }
        if self.settings.dynamic_metadata {
            response.dynamic_metadata = Some(metadata::build(&req, &passed_metadata));
        }
        Ok(response)
    }
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, Status> {
        Ok(tonic::Response::new(
            self.handle(request.into_inner()).await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadOptions;
    use crate::store::{BoxFuture, StoreHealth};

    /// A store that answers one count too few.
    struct Short;

    impl Store for Short {
        fn increment<'a>(
            &'a self,
            batch: &'a [Increment],
        ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
            let n = batch.len().saturating_sub(1);
            Box::pin(std::future::ready(Ok(vec![Tally::Count(0); n])))
        }

        fn health(&self) -> StoreHealth {
            StoreHealth {
                backend: "short",
                in_use: "short",
                healthy: true,
                detail: None,
            }
        }
    }

    #[tokio::test]
    async fn a_short_answer_from_any_store_is_an_error_not_an_admit() {
        let dir = tempfile::tempdir().unwrap();
        let rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
        std::fs::write(dir.path().join("d.yaml"), rules).unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let live = LiveRules::load(dir.path(), LoadOptions::default(), metrics.clone()).unwrap();
        let limiter = RateLimiter::new(
            Arc::new(live),
            Arc::new(Short),
            metrics,
            Settings::default(),
        );
        let req = Request {
            domain: "d".into(),
            descriptors: vec![crate::request::Descriptor {
                entries: vec![("k".into(), "v".into())],
                limit: None,
                hits_addend: None,
                hits: 1,
            }],
            hits_addend: 0,
        };
        let e = limiter.decide(req).await.unwrap_err();
        assert!(
            matches!(e, ServiceError::Store(StoreError::BadReply(_))),
            "{e}"
        );
    }
}
