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

use crate::config::{LimitDef, LiveRules, Rule};
use crate::limiter::{self, Counted, Now, Unit, Window};
use crate::metrics::{Metrics, Outcome, RuleStats};
use crate::request::{Request, RequestError};
use crate::store::{CounterKey, Increment, Store, StoreError};

mod metadata;

/// Service-wide switches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// Answer OK whatever the limits say (statuses still tell the truth).
    pub global_shadow: bool,
    /// Fill `dynamic_metadata` as the reference's `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
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

/// How one descriptor resolved against the rules.
enum Resolved<'a> {
    NoLimit,
    Unlimited,
    Counted {
        requests_per_unit: u32,
        unit: Unit,
        rule: Option<&'a Rule>,
        stats: Arc<RuleStats>,
        key: CounterKey,
    },
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
        let result = match Request::try_from(req) {
            Ok(req) => self.decide(req).await,
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
        let now = Now::wall();
        let loaded = self.rules.snapshot();
        let Some(domain) = loaded.rules.domain(&req.domain) else {
            self.metrics.domain_not_found();
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: vec![ok_status(); req.descriptors.len()],
                ..Default::default()
            });
        };
        let mut resolved: Vec<Resolved<'_>> = Vec::with_capacity(req.descriptors.len());
        let mut metric_paths: Vec<Option<String>> = Vec::with_capacity(req.descriptors.len());
        let mut replaced: Vec<&str> = Vec::new();
        for d in &req.descriptors {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            if let Some(o) = d.limit {
                resolved.push(Resolved::Counted {
                    requests_per_unit: o.requests_per_unit,
                    unit: o.unit,
                    rule: None,
                    stats: domain.override_stats.clone(),
                    key: CounterKey::new(&req.domain, o.unit, entries.iter().copied()),
                });
                metric_paths.push(None);
                continue;
            }
            let Some(m) = domain.find(&entries) else {
                resolved.push(Resolved::NoLimit);
                metric_paths.push(None);
                continue;
            };
            let rule: &Rule = m.rule;
            replaced.extend(rule.replaces.iter().map(|r| &**r));
            resolved.push(match rule.limit {
                LimitDef::Unlimited => Resolved::Unlimited,
                LimitDef::Limited {
                    unit,
                    requests_per_unit,
                } => {
                    let values = entries.iter().enumerate().map(|(i, (k, v))| {
                        let shared = m.shared.iter().find(|(j, _)| *j == i).map(|(_, p)| *p);
                        (*k, shared.unwrap_or(v))
                    });
                    Resolved::Counted {
                        requests_per_unit,
                        unit,
                        rule: Some(rule),
                        stats: rule.stats.clone(),
                        key: CounterKey::new(&req.domain, unit, values),
                    }
                }
            });
            metric_paths.push(m.metric_path);
        }
        apply_replaces(&mut resolved, &replaced);

        let increments: Vec<Increment> = resolved
            .iter()
            .zip(&req.descriptors)
            .filter_map(|(r, d)| match r {
                Resolved::Counted {
                    unit,
                    key,
                    requests_per_unit,
                    ..
                } => Some(Increment {
                    key: key.clone(),
                    hits: d.hits,
                    limit: *requests_per_unit,
                    window: Window::containing(*unit, now),
                }),
                _ => None,
            })
            .collect();
        let counts = if increments.is_empty() {
            Vec::new()
        } else {
            self.store.increment(&increments).await?
        };

        let mut counts = counts.into_iter();
        let mut statuses = Vec::with_capacity(resolved.len());
        let mut decided = Vec::with_capacity(increments.len());
        let mut passed_metadata: Vec<&Struct> = Vec::new();
        for ((r, d), metric_path) in resolved.iter().zip(&req.descriptors).zip(metric_paths) {
            let Resolved::Counted {
                requests_per_unit,
                unit,
                rule,
                stats,
                ..
            } = r
            else {
                statuses.push(match r {
                    Resolved::Unlimited => DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: u32::MAX,
                        ..Default::default()
                    },
                    _ => ok_status(),
                });
                continue;
            };
            let after = counts.next().unwrap_or(0);
            let s = limiter::status(
                &Counted {
                    requests_per_unit: *requests_per_unit,
                    window: Window::containing(*unit, now),
                    hits: d.hits,
                    after,
                    shadow: rule.is_some_and(|r| r.shadow_mode),
                    quota: rule.is_some_and(|r| r.quota_mode),
                },
                now,
            );
            match (&metric_path, rule) {
                (Some(path), Some(rule)) => self
                    .metrics
                    .detailed(&rule.domain, path, stats)
                    .add(&s.stats),
                _ => stats.add(&s.stats),
            }
            let over_before_shadow = after > u64::from(*requests_per_unit);
            if !over_before_shadow && let Some(md) = rule.and_then(|r| r.metadata.as_ref()) {
                passed_metadata.push(md);
            }
            statuses.push(DescriptorStatus {
                code: if s.over { Code::OverLimit } else { Code::Ok } as i32,
                current_limit: Some(RateLimit {
                    name: rule
                        .and_then(|r| r.name.as_deref())
                        .unwrap_or_default()
                        .to_owned(),
                    requests_per_unit: *requests_per_unit,
                    unit: unit.proto(),
                }),
                limit_remaining: s.remaining,
                duration_until_reset: Some(PbDuration {
                    seconds: i64::try_from(s.reset_seconds).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                quota: None,
            });
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

/// A matched rule whose `name` another matched rule `replaces` is dropped: its
/// descriptor answers OK with no limit and its counter is not touched.
fn apply_replaces(resolved: &mut [Resolved<'_>], replaced: &[&str]) {
    if replaced.is_empty() {
        return;
    }
    for r in resolved.iter_mut() {
        if let Resolved::Counted {
            rule: Some(rule), ..
        } = r
            && rule.name.as_deref().is_some_and(|n| replaced.contains(&n))
        {
            *r = Resolved::NoLimit;
        }
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
