//! One decision, start to end: one clock read, the rules' snapshot, the
//! descriptors resolved against it, one store call for every counted limit,
//! each descriptor judged by its tightest limit, and the answer Envoy gets.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::Struct;

use super::headers::{self, Shown};
use super::metadata;
use super::resolve::{Counting, Resolved, resolve};
use super::{Call, RateLimiter, ResponseHeaders, ServiceError, ok_status};
use crate::limiter::{self, Decision, Now, Tally};
use crate::request::{Descriptor, Request};
use crate::store::{Increment, expect_counts};

/// What the descriptors came to, gathered for the answer.
struct Verdicts<'r> {
    /// One per descriptor of the request, in order.
    statuses: Vec<DescriptorStatus>,
    /// Every counted limit's status so far, for the overall code and
    /// Retry-After.
    decided: limiter::Summarizing,
    /// The metadata of counted descriptors not over their limit.
    passed_metadata: Vec<&'r Struct>,
    /// What the rate-limit headers show, when sluice adds them.
    shown: Vec<Shown>,
}

impl RateLimiter {
    pub(super) async fn decide_call(
        &self,
        req: Request,
        call: &Call<'_>,
    ) -> Result<RateLimitResponse, ServiceError> {
        // The request's one clock reading: every window, bucket and reset
        // of its answer follows from it, in the stores too.
        let at_us = Now::wall_us();
        let now_ms = at_us / 1000;
        let loaded = self.rules.snapshot();
        let Some(domain) = loaded.rules.domain(&req.domain) else {
            // Generation 0: rules come over xDS and none has arrived yet.
            if loaded.generation == 0 {
                return Err(ServiceError::NoRulesYet);
            }
            self.metrics.domain_not_found();
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: vec![ok_status(); req.descriptors.len()],
                ..Default::default()
            });
        };
        let resolved = resolve(domain, &req);
        let counts = self.counts(&req, &resolved, at_us, call).await?;
        let verdicts = self.judge(&req, &resolved, counts, now_ms);
        Ok(self.respond(&req, verdicts))
    }

    /// The store's count for every counted limit, in order: one call (two
    /// with `--stop-increment-when-over-limit` and several limits).
    async fn counts(
        &self,
        req: &Request,
        resolved: &[(usize, Resolved<'_>)],
        at_us: u64,
        call: &Call<'_>,
    ) -> Result<Vec<Tally>, ServiceError> {
        let mut increments: Vec<Increment> = resolved
            .iter()
            .filter_map(|(i, r)| match (r, req.descriptors.get(*i)) {
                (Resolved::Counted(c), Some(d)) => {
                    Some(c.increment(d.hits, d.refund, at_us, &self.settings.knobs))
                }
                _ => None,
            })
            .collect();
        if self.settings.knobs.stop_when_over && increments.len() > 1 {
            self.spare_the_others(&mut increments, at_us / 1000, call)
                .await?;
        }
        if increments.is_empty() {
            return Ok(Vec::new());
        }
        // One count per increment, or an error: a missing count must never
        // read as zero and admit.
        let counted = self.count(&increments, call).await?;
        Ok(expect_counts(counted, increments.len())?)
    }

    /// Each descriptor's status, from the tightest of its limits.
    fn judge<'r>(
        &self,
        req: &Request,
        resolved: &[(usize, Resolved<'r>)],
        counts: Vec<Tally>,
        now_ms: u64,
    ) -> Verdicts<'r> {
        let mut counts = counts.into_iter();
        let mut v = Verdicts {
            statuses: Vec::with_capacity(req.descriptors.len()),
            decided: limiter::Summarizing::default(),
            passed_metadata: Vec::new(),
            shown: Vec::new(),
        };
        let mut entries = resolved.iter().peekable();
        for (i, d) in req.descriptors.iter().enumerate() {
            // This descriptor's limits: the tightest one is reported.
            let mut tightest: Option<(limiter::Status, DescriptorStatus)> = None;
            while let Some((_, r)) = entries.next_if(|(j, _)| *j == i) {
                let c = match r {
                    Resolved::NoLimit => {
                        tightest.get_or_insert((limiter::Status::none(), ok_status()));
                        continue;
                    }
                    Resolved::Unlimited => {
                        let unlimited = DescriptorStatus {
                            limit_remaining: u32::MAX,
                            ..ok_status()
                        };
                        tightest.get_or_insert((limiter::Status::none(), unlimited));
                        continue;
                    }
                    Resolved::Counted(c) => c,
                };
                let tally = counts.next().unwrap_or(Tally::Decided(Decision::Refuse));
                let (s, status) = self.judge_limit(c, d, tally, now_ms, &mut v);
                if tightest.as_ref().is_none_or(|(t, _)| s.tighter_than(t)) {
                    tightest = Some((s, status));
                }
                v.decided.add(&s);
            }
            v.statuses
                .push(tightest.map_or_else(ok_status, |(_, st)| st));
        }
        v
    }

    /// One counted limit: its status, counted in the rule's metrics and the
    /// console's top, its metadata and headers gathered.
    fn judge_limit<'r>(
        &self,
        c: &Counting<'r>,
        d: &Descriptor,
        tally: Tally,
        now_ms: u64,
        v: &mut Verdicts<'r>,
    ) -> (limiter::Status, DescriptorStatus) {
        let s = c.decide(d.hits, d.refund, tally, now_ms, &self.settings.knobs);
        // Which usage levels this key crossed (one or two relaxed adds).
        if let Some((before, after, hits)) = crate::usage::crossing(tally, d.hits, d.refund) {
            let window = c.period.seconds();
            c.stats
                .usage
                .record(window, now_ms / 1000, before, after, hits);
        }
        if s.stats.over_limit > 0 {
            // Only over-limit descriptors reach the console's top.
            let rule = c.rule.map_or("_override", |r| &r.label);
            self.watch
                .over_limit(&c.key, rule, s.stats.over_limit, now_ms / 1000);
        }
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
            && let Some(md) = c.rule.and_then(|r| r.metadata.as_deref())
        {
            v.passed_metadata.push(md);
        }
        if self.settings.response_headers != ResponseHeaders::None {
            v.shown.push(c.shown(&s));
        }
        let status = c.status(&s);
        (s, status)
    }

    /// The answer: the overall code, Retry-After, the rate-limit headers and
    /// the dynamic metadata.
    fn respond(&self, req: &Request, v: Verdicts<'_>) -> RateLimitResponse {
        let summary = v.decided.summary(self.settings.global_shadow);
        if summary.shadowed {
            self.metrics.global_shadow_mode();
        }
        let mut response = RateLimitResponse {
            overall_code: if summary.over {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            statuses: v.statuses,
            ..Default::default()
        };
        if let Some(wait) = summary.retry_after {
            response.response_headers_to_add.push(HeaderValue {
                key: "Retry-After".into(),
                value: wait.to_string(),
                raw_value: Vec::new(),
            });
        }
        response
            .response_headers_to_add
            .extend(headers::build(self.settings.response_headers, &v.shown));
        if self.settings.dynamic_metadata {
            response.dynamic_metadata = Some(metadata::build(req, &v.passed_metadata));
        }
        response
    }
}
