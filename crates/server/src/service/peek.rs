//! A decision that spends nothing, for an operator's lookup and reset: the
//! descriptors are parsed, normalised and hashed as a request's are and
//! resolved against the rules in force, and every counted limit is asked of
//! the store with no hits (past the local over-limit cache, so the answer is
//! the store's). Nothing is counted in the rules' metrics or the console.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use super::resolve::{Counting, Resolved, resolve};
use super::{RateLimiter, ServiceError};
use crate::limiter::{self, Now, Tally};
use crate::request::Request;
use crate::store::{Increment, StoreError, expect_counts};

/// One limit a descriptor meets, as it stands now.
#[derive(Debug)]
pub(crate) struct PeekedLimit {
    /// The rule's path (`path:name` for one of a `rate_limits` list), or
    /// `_override` for Envoy's per-request limit.
    pub(crate) rule: String,
    pub(crate) name: Option<String>,
    pub(crate) shape: &'static str,
    pub(crate) limit: u32,
    /// A token bucket's burst: the tokens it holds when full.
    pub(crate) burst: Option<u32>,
    pub(crate) window_seconds: u64,
    pub(crate) shadow_mode: bool,
    /// What the store holds (or what the failure policy decided).
    pub(crate) tally: Tally,
    /// The status a request of no hits would get now.
    pub(crate) status: limiter::Status,
    /// The counter, for a reset.
    pub(crate) increment: Increment,
}

/// One descriptor: its entries as counted (email values hashed) and the
/// limits it meets.
#[derive(Debug)]
pub(crate) struct PeekedDescriptor {
    pub(crate) entries: Vec<(String, String)>,
    pub(crate) limits: Vec<PeekedLimit>,
    /// A rule matched that sets no limit (`unlimited: true`).
    pub(crate) unlimited: bool,
}

/// A lookup's answer.
#[derive(Debug)]
pub(crate) struct Peeked {
    /// The rules the counts were found by: the explanation of a lookup or
    /// reset is drawn from these too, never from a reload since.
    pub(crate) rules: std::sync::Arc<crate::config::Loaded>,
    pub(crate) request: Request,
    /// The domain has rules loaded.
    pub(crate) domain_known: bool,
    pub(crate) descriptors: Vec<PeekedDescriptor>,
}

impl RateLimiter {
    /// `req` parsed and protected as a request is. A value of an email key
    /// that is already a digest (32 hex digits, as the console's top and
    /// `/api/counters/top` show it) is taken as it is, so a key read off
    /// the top can be looked up.
    pub(crate) fn counters_request(&self, req: RateLimitRequest) -> Result<Request, ServiceError> {
        let mut req = Request::parse(req, &self.settings.limits)?;
        req.protect_unless(&self.settings.privacy, |v| {
            v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit())
        });
        Ok(req)
    }

    /// What every descriptor of `req` meets now, spending nothing.
    pub(crate) async fn peek(&self, req: Request) -> Result<Peeked, ServiceError> {
        let at_us = Now::wall_us();
        let loaded = self.rules.snapshot();
        let Some(domain) = loaded.rules.domain(&req.domain) else {
            return Ok(Peeked {
                rules: loaded.clone(),
                request: req,
                domain_known: false,
                descriptors: Vec::new(),
            });
        };
        let resolved = resolve(domain, &req);
        let increments = self.reads(&resolved, at_us);
        let tallies = if increments.is_empty() {
            Vec::new()
        } else {
            let got = self.store.increment(&increments).await?;
            expect_counts(got, increments.len())?
        };
        let mut found = increments.into_iter().zip(tallies);
        let descriptors = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mine = resolved.iter().filter(|(j, _)| *j == i);
                let mut out = PeekedDescriptor {
                    entries: d.entries.clone(),
                    limits: Vec::new(),
                    unlimited: false,
                };
                for (_, r) in mine {
                    match r {
                        Resolved::Counted(c) => {
                            if let Some((inc, tally)) = found.next() {
                                out.limits.push(self.peeked(c, inc, tally, at_us));
                            }
                        }
                        Resolved::Unlimited => out.unlimited = true,
                        Resolved::NoLimit => {}
                    }
                }
                out
            })
            .collect();
        Ok(Peeked {
            rules: loaded.clone(),
            request: req,
            domain_known: true,
            descriptors,
        })
    }

    /// What each counted rule reads: an increment of nothing, past the
    /// cache and leases (the store's own count).
    fn reads(&self, resolved: &[(usize, Resolved<'_>)], at_us: u64) -> Vec<Increment> {
        resolved
            .iter()
            .filter_map(|(_, r)| match r {
                Resolved::Counted(c) => Some(Increment {
                    cacheable: false,
                    leasable: false,
                    usage_counts_refused: false,
                    ..c.increment(0, false, at_us, &self.settings.knobs)
                }),
                _ => None,
            })
            .collect()
    }

    fn peeked(
        &self,
        c: &Counting<'_>,
        increment: Increment,
        tally: Tally,
        at_us: u64,
    ) -> PeekedLimit {
        let status = c.decide(0, false, tally, at_us / 1000, &self.settings.knobs);
        PeekedLimit {
            rule: c.rule.map_or("_override".into(), |r| r.label.to_string()),
            name: c.rule.and_then(|r| r.name.as_deref()).map(str::to_owned),
            shape: c.algorithm.name(),
            limit: c.requests_per_unit,
            burst: match c.algorithm {
                crate::limiter::Algorithm::TokenBucket { burst, .. } => Some(burst),
                _ => None,
            },
            window_seconds: c.period.seconds(),
            shadow_mode: c.rule.is_some_and(|r| r.shadow_mode),
            tally,
            status,
            increment,
        }
    }

    /// Empties the counters `peeked` found (an operator's reset).
    pub(crate) async fn reset(&self, peeked: &Peeked) -> Result<(), StoreError> {
        let batch: Vec<Increment> = peeked
            .descriptors
            .iter()
            .flat_map(|d| d.limits.iter().map(|l| l.increment.clone()))
            .collect();
        if batch.is_empty() {
            return Ok(());
        }
        self.store.reset(&batch).await
    }
}
