//! Descriptors to limits: each descriptor of a request resolves to no limit,
//! an unlimited rule, or one counted limit per limit of its rule (a rule's
//! `rate_limits` may hold several).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;

use crate::config::{Domain, LimitDef, Match, Rule};
use crate::limiter::{self, Algorithm, Counted, Now, Period, Tally, Window};
use crate::request::{Descriptor, Request};
use crate::rule_stats::RuleStats;
use crate::store::{CountedLate, CounterKey, Increment, KeySpace};

use super::headers::Shown;

/// Server-wide settings a decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    /// Every descriptor is a quota descriptor (`--quota-mode`).
    pub quota_mode: bool,
    /// `--near-limit-ratio`.
    pub near_ratio: f32,
    /// `--stop-increment-when-over-limit`.
    pub stop_when_over: bool,
    /// `--refundable-overrides`: a per-request override is refundable.
    pub refundable_overrides: bool,
    /// The store leases allowance (a shared store, `--leased-allowance`):
    /// it tells a rule's usage of the hits it answers from leases.
    pub leases: bool,
    /// The store is shared (Redis, Cluster, Sentinel, memcached): a rule
    /// that counts after is answered on credit (the memory store is local
    /// and exact anyway).
    pub shared: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            quota_mode: false,
            near_ratio: limiter::NEAR_LIMIT_RATIO,
            stop_when_over: false,
            refundable_overrides: false,
            leases: false,
            shared: false,
        }
    }
}

/// A descriptor that will be counted: a configured rule, or Envoy's override.
pub(super) struct Counting<'a> {
    pub(super) requests_per_unit: u32,
    pub(super) period: Period,
    pub(super) algorithm: Algorithm,
    /// `None` for a per-request override, which has no rule behind it.
    pub(super) rule: Option<&'a Rule>,
    pub(super) stats: &'a Arc<RuleStats>,
    /// The stats path when it carries runtime values (`detailed_metric`).
    pub(super) metric_path: Option<String>,
    pub(super) key: CounterKey,
    /// `algorithm: concurrency`: the slot, the last entry's value (left out
    /// of `key`, so every request of the rest shares one counter).
    pub(super) slot: Option<Box<str>>,
}

/// How one descriptor resolved against the rules.
pub(super) enum Resolved<'a> {
    NoLimit,
    Unlimited,
    Counted(Counting<'a>),
}

impl Counting<'_> {
    /// What to count for `hits` (or give back, `refund`) at the request's
    /// clock reading `at_us`.
    pub(super) fn increment(
        &self,
        hits: u64,
        refund: bool,
        at_us: u64,
        knobs: &Knobs,
    ) -> Increment {
        // Marked refundable: its rule, or `--refundable-overrides` for an
        // override, which has no rule to carry the mark.
        let refundable = self
            .rule
            .map_or(knobs.refundable_overrides, |r| r.refundable);
        // A refundable counter's count falls with every refund, which
        // would void other instances' leases again and again: it asks
        // the store for every request, as `leased_allowance: false`.
        let leasable = !refundable && self.rule.is_none_or(|r| r.leased_allowance);
        let fixed = !refund && self.algorithm == Algorithm::FixedWindow && self.slot.is_none();
        let count_after =
            knobs.shared && fixed && !refundable && self.rule.is_some_and(|r| r.count_after);
        Increment {
            key: self.key.clone(),
            hits,
            at_us,
            refund,
            // Every other rule is cached: a refusal is trusted for half a
            // second, so a refund or reset through any instance is seen on
            // every one within that (the marked ones are never cached). A
            // shadow-mode rule is cached too (a flood of it must not reach
            // the store): the cache keeps its hits for the store to count.
            cacheable: !refundable,
            leasable,
            // A shadow-mode rule refuses no one: its whole demand is usage.
            usage_counts_refused: self.rule.is_some_and(|r| r.shadow_mode),
            limit: self.store_limit(),
            window: Window::containing(self.period, Now(at_us / 1_000_000)),
            algorithm: self.algorithm,
            on_failure: self.rule.and_then(|r| r.on_failure),
            slot: self.slot.clone(),
            // A shadow-mode rule's hits the cache answers are counted by
            // the store later: its usage hears of them then.
            late: match self.rule {
                Some(r) if r.shadow_mode && !refundable => {
                    Some(self.stats.clone() as Arc<dyn CountedLate>)
                }
                _ => None,
            },
            // The usage of hits answered from leased allowance is told by
            // the store, as the count moves (the chunk taken, positions
            // given back): the answers themselves cross no level.
            // So is the usage of hits answered on credit, when counted.
            leased_usage: (fixed && (knobs.leases && leasable || count_after))
                .then(|| self.stats.clone() as Arc<dyn CountedLate>),
            take: None,
            count_after,
        }
    }

    /// The limit the store holds the count against. A concurrency rule in
    /// shadow mode refuses no one, so its requests really are in flight:
    /// the store holds their slots up to twice its limit, so its usage
    /// shows how far demand goes past the limit (and stays bounded).
    fn store_limit(&self) -> u32 {
        let shadow = self.rule.is_some_and(|r| r.shadow_mode);
        match self.algorithm {
            Algorithm::Concurrency if shadow => self.requests_per_unit.saturating_mul(2),
            _ => self.requests_per_unit,
        }
    }

    /// The status of `hits` counted (or given back, `refund`) as `tally` says.
    pub(super) fn decide(
        &self,
        hits: u64,
        refund: bool,
        tally: Tally,
        now_ms: u64,
        knobs: &Knobs,
    ) -> limiter::Status {
        let now = Now(now_ms / 1000);
        let window = Window::containing(self.period, now);
        let decide = if refund {
            limiter::refunded
        } else {
            limiter::status
        };
        decide(
            &Counted {
                requests_per_unit: self.requests_per_unit,
                window,
                algorithm: self.algorithm,
                hits,
                tally,
                elapsed_ms: now_ms.saturating_sub(window.start.0.saturating_mul(1000)),
                shadow: self.rule.is_some_and(|r| r.shadow_mode),
                quota: knobs.quota_mode || self.rule.is_some_and(|r| r.quota_mode),
                near_ratio: knobs.near_ratio,
            },
            now,
        )
    }

    /// This limit as `--response-headers` describe it.
    pub(super) fn shown(&self, s: &limiter::Status) -> Shown {
        Shown {
            name: self
                .rule
                .map_or("_override", |r| r.name.as_deref().unwrap_or(&r.label))
                .to_owned(),
            limit: self.requests_per_unit,
            window_seconds: self.period.seconds(),
            remaining: s.remaining,
            reset_seconds: s.reset_seconds,
        }
    }

    pub(super) fn status(&self, s: &limiter::Status) -> DescriptorStatus {
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
/// A descriptor whose rule has several limits (`rate_limits`) yields one
/// entry per limit, all with the descriptor's index, in order.
pub(super) fn resolve<'a>(domain: &'a Domain, req: &Request) -> Vec<(usize, Resolved<'a>)> {
    let mut replaced: Vec<&str> = Vec::new();
    let mut resolved: Vec<(usize, Resolved<'a>)> = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.iter().enumerate() {
        if let Some(o) = d.limit {
            let entries = d.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            resolved.push((
                i,
                Resolved::Counted(Counting {
                    requests_per_unit: o.requests_per_unit,
                    period: Period::Unit(o.unit),
                    algorithm: Algorithm::FixedWindow,
                    rule: None,
                    stats: &domain.override_stats,
                    metric_path: None,
                    key: CounterKey::new(&req.domain, o.unit, entries),
                    slot: None,
                }),
            ));
            continue;
        }
        match domain.find(&d.entries) {
            None => resolved.push((i, Resolved::NoLimit)),
            Some(m) => matched(i, &req.domain, d, &m, &mut resolved, &mut replaced),
        }
    }
    // A matched rule that another matched rule `replaces` does not count.
    for (_, r) in resolved.iter_mut() {
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

/// The limits of descriptor `i`'s matched rule (and the rules it carries
/// with it), noting the names they replace.
fn matched<'a>(
    i: usize,
    domain: &str,
    d: &Descriptor,
    m: &Match<'a>,
    resolved: &mut Vec<(usize, Resolved<'a>)>,
    replaced: &mut Vec<&'a str>,
) {
    let first: &'a Rule = m.rule;
    for rule in std::iter::once(first).chain(first.also.iter().map(|r| &**r)) {
        replaced.extend(rule.replaces.iter().map(|r| &**r));
        let LimitDef::Limited {
            period,
            requests_per_unit,
            algorithm,
        } = rule.limit
        else {
            resolved.push((i, Resolved::Unlimited));
            continue;
        };
        // A concurrency rule's slot is its last entry's value, which the
        // counter leaves out.
        let slot = (algorithm == Algorithm::Concurrency)
            .then(|| d.entries.last().map(|(_, v)| Box::from(v.as_str())))
            .flatten();
        let last = d.entries.len().saturating_sub(1);
        // share_threshold: the configured pattern stands for the value.
        let values = d.entries.iter().enumerate().map(|(i, (k, v))| {
            let shared = m.shared.iter().find(|(j, _)| *j == i).map(|(_, p)| *p);
            let value = if slot.is_some() && i == last {
                ""
            } else {
                v.as_str()
            };
            (k.as_str(), shared.unwrap_or(value))
        });
        resolved.push((
            i,
            Resolved::Counted(Counting {
                requests_per_unit,
                period,
                algorithm,
                rule: Some(rule),
                stats: &rule.stats,
                key: CounterKey::new(domain, KeySpace { period, algorithm }, values),
                metric_path: m.metric_path.clone(),
                slot,
            }),
        ));
    }
}
