//! What a bucket id means under the rules in force: open (nothing limits
//! it) or a rule's budget, shared through one demand table per bucket.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use sha2::{Digest, Sha256};

use super::Shared;
use super::share::{Assignment, bucket, split};
use super::stats::RuleQuota;
use crate::config::{LimitDef, Rule};
use crate::limiter::Algorithm;
use crate::metrics::{Skip, StatDelta};
use crate::store::FailurePolicy;
use crate::store::demand::{MemberDemand, UNKNOWN};

pub(super) enum Target {
    /// No rule limits the bucket (no match, `unlimited`, unknown domain).
    Open,
    Limited(Limited),
}

pub(super) struct Limited {
    rule: Arc<Rule>,
    /// Quota's numbers of the rule.
    quota: Arc<RuleQuota>,
    /// The demand table: the domain and a digest of the bucket's path, so
    /// no runtime value reaches the store in clear.
    table: String,
    limit: u32,
    period: u64,
    algorithm: Algorithm,
    /// This Envoy's last share, requests per second (shadow accounting).
    share: Option<f64>,
}

/// Matches a bucket (entries sorted by key) against the domain's rules.
pub(super) fn resolve(shared: &Shared, domain: &str, key: &[(String, String)]) -> Target {
    let loaded = shared.rules.current();
    let Some(d) = loaded.rules.domain(domain) else {
        shared.metrics.quota_skip(Skip::UnknownDomain);
        return Target::Open;
    };
    let entries: Vec<(&str, &str)> = key.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(m) = d.find_bucket(&entries) else {
        return Target::Open;
    };
    match m.rule.limit {
        LimitDef::Unlimited => Target::Open,
        // A quota bucket is a rate; slots are taken and given back per
        // request, which RLQS never reports. The ratelimit filter holds them.
        LimitDef::Limited {
            algorithm: crate::limiter::Algorithm::Concurrency,
            ..
        } => Target::Open,
        LimitDef::Limited {
            requests_per_unit,
            period,
            algorithm,
        } => {
            let mut h = Sha256::new();
            for (k, v) in &m.path {
                h.update(k.as_bytes());
                h.update([0]);
                h.update(v.as_bytes());
                h.update([0]);
            }
            h.update(m.rule.label.as_bytes());
            let mut table = format!("{domain}:");
            crate::hex::push_hex(&mut table, h.finalize().get(..16).unwrap_or_default());
            Target::Limited(Limited {
                quota: shared.stats.rule(domain, &m.rule.label),
                rule: m.rule,
                table,
                limit: requests_per_unit,
                period: period.seconds().max(1),
                algorithm,
                share: None,
            })
        }
    }
}

impl Target {
    /// The demand table and the rule's failure policy, when limited.
    pub(super) fn table(&self) -> Option<(&str, Option<FailurePolicy>)> {
        match self {
            Target::Open => None,
            Target::Limited(l) => Some((&l.table, l.rule.on_failure)),
        }
    }

    /// The rule's rate, requests per second, when it shares a budget.
    pub(super) fn rate(&self) -> Option<f64> {
        match self {
            Target::Limited(l) if l.limit > 0 => Some(f64::from(l.limit) / l.period as f64),
            _ => None,
        }
    }

    /// This member's assignment given the fleet's demands.
    pub(super) fn assignment(
        &mut self,
        member: u64,
        members: &[MemberDemand],
        global_shadow: bool,
    ) -> Assignment {
        let Some(rate) = self.rate() else {
            return self.with_share(0.0, UNKNOWN, members.len(), global_shadow);
        };
        let shares = split(rate, members);
        let at = members.iter().position(|m| m.member == member);
        let mine = at
            .and_then(|i| shares.get(i).copied())
            // Not in the table (a store that lost the write): an even part
            // with one more member.
            .unwrap_or(rate / (members.len() + 1) as f64);
        let demand = at
            .and_then(|i| members.get(i))
            .map_or(UNKNOWN, |m| m.demand);
        self.with_share(mine, demand, members.len(), global_shadow)
    }

    /// The assignment of a share of `mine` for an Envoy claiming `demand`
    /// among `fleet` Envoys.
    pub(super) fn with_share(
        &mut self,
        mine: f64,
        demand: f64,
        fleet: usize,
        global_shadow: bool,
    ) -> Assignment {
        let Target::Limited(l) = self else {
            return Assignment::AllowAll;
        };
        if l.limit == 0 {
            return Assignment::DenyAll;
        }
        l.share = Some(mine);
        if l.rule.shadow_mode || global_shadow {
            return Assignment::AllowAll;
        }
        Assignment::Bucket(bucket(mine, demand, l.limit, l.period, l.algorithm, fleet))
    }

    /// Counts a report: Envoy's own allowed and denied, and for a shadow
    /// rule what the share would have denied.
    pub(super) fn reported(&self, allowed: u64, denied: u64, elapsed: f64) {
        let Target::Limited(l) = self else {
            return;
        };
        let stats = &l.rule.stats;
        // Saturating: no report, however large, wraps a rule's counters.
        for (c, n) in [(&l.quota.allowed, allowed), (&l.quota.denied, denied)] {
            let _ = c.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(n)));
        }
        let would_deny = match (l.share, l.rule.shadow_mode) {
            (Some(share), true) => {
                let allowed_f = allowed as f64;
                // Truncation: whole requests over the share.
                (allowed_f - share * elapsed).max(0.0) as u64
            }
            _ => 0,
        }
        .min(allowed);
        stats.add(&StatDelta {
            total_hits: allowed.saturating_add(denied),
            over_limit: denied.saturating_add(would_deny),
            within_limit: allowed - would_deny,
            shadow_mode: would_deny,
            near_limit: 0,
            refunded: 0,
        });
    }

    /// One more (or one fewer) Envoy reporting this rule here.
    pub(super) fn subscribe(&self, joined: bool) {
        if let Target::Limited(l) = self {
            let q = &l.quota;
            if joined {
                q.envoys.fetch_add(1, Relaxed);
                let milli = (f64::from(l.limit) / l.period as f64 * 1000.0) as u64;
                q.limit_milli.store(milli, Relaxed);
            } else {
                q.envoys.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Moves the rule's assigned-rate gauge from `held` to `new`.
    pub(super) fn assigned(&self, held: Option<&Assignment>, new: &Assignment) {
        let Target::Limited(l) = self else {
            return;
        };
        let rate = |a: Option<&Assignment>| match a {
            Some(Assignment::Bucket(b)) => {
                (f64::from(b.tokens_per_fill) / f64::from(b.fill_interval_seconds.max(1)) * 1000.0)
                    as i64
            }
            _ => 0,
        };
        let delta = rate(Some(new)) - rate(held);
        l.quota.assigned_milli.fetch_add(delta, Relaxed);
    }
}
