//! Assignments for a stream's buckets: which need a store call, which the
//! budgets allow, and what Envoy is sent.

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use futures_util::future::join_all;
use tokio::time::Instant;

use super::QuotaStream;
use crate::quota::action::{assignment, bucket_id};
use crate::quota::budget::fair_rate;
use crate::quota::share::{self, Assignment};
use crate::quota::target::Target;
use crate::store::demand::{DemandUpdate, Fleet};

/// How a bucket gets its fleet this round.
enum Plan {
    /// Its rule keeps no table: allowed.
    NoTable,
    /// Read lately by another stream of this instance.
    Cached(Fleet),
    /// Read lately and split already: this stream's share, and the fleet's
    /// size.
    Shared(f64, usize),
    /// Write this stream's demand and read the fleet.
    Call(DemandUpdate),
    /// The budgets are spent: keep what Envoy holds.
    Deferred,
}

/// What a plan came to.
enum Got {
    NoTable,
    Cached(Fleet),
    Shared(f64, usize),
    Called(Fleet),
    Deferred,
}

impl QuotaStream {
    /// What `key` needs to be assigned: a fleet another stream read lately
    /// (only on the timer, and only while this stream's own entry is
    /// fresh), or a store call that writes its demand and reads the fleet.
    fn plan(&self, key: &[(String, String)], only_changed: bool, now: Instant) -> Plan {
        let Some(b) = self.state.buckets.get(key) else {
            return Plan::NoTable;
        };
        let Some((table, on_failure)) = b.shell.target.table() else {
            return Plan::NoTable;
        };
        let ttl = self.shared.opts.assignment_ttl;
        let written_lately = b.written.is_some_and(|w| now.duration_since(w) < ttl / 3);
        if only_changed && written_lately {
            let fresh = self.shared.opts.rebalance / 2;
            let fleets = &self.shared.fleets;
            let rate = b.shell.target.rate();
            if let Some((mine, fleet)) =
                rate.and_then(|r| fleets.share(table, fresh, self.member, b.demand, r))
            {
                return Plan::Shared(mine, fleet);
            }
            if let Some(members) = fleets.get(table, fresh, self.member, b.demand) {
                return Plan::Cached(Fleet::Members(members));
            }
            // Another stream is reading this fleet now: its entry is
            // fresh, so this tick keeps what Envoy holds and the next one
            // shares that read.
            if !fleets.claim(table, fresh) {
                return Plan::Deferred;
            }
        }
        Plan::Call(DemandUpdate {
            table: table.to_owned(),
            member: self.member,
            demand: Some(b.demand),
            ttl,
            on_failure,
        })
    }

    /// Store calls the budgets allow now, out of `wanted`; the rest are
    /// counted as deferred.
    pub(super) fn afford(&mut self, wanted: usize) -> usize {
        let opts = &self.shared.opts;
        let rate = fair_rate(
            opts.stream_store_rate,
            opts.store_rate,
            self.shared.open_streams(),
        );
        let granted = self.shared.budget.grant(&mut self.budget, wanted, rate);
        if granted < wanted {
            self.shared
                .metrics
                .quota_deferred((wanted - granted) as u64);
        }
        granted
    }

    /// Computes the assignments of `keys`; with `only_changed`, keeps those
    /// that moved enough to be worth replacing Envoy's bucket. Store calls
    /// go to the first keys while the budgets last.
    pub(super) async fn assign(
        &mut self,
        keys: &[Vec<(String, String)>],
        only_changed: bool,
    ) -> Vec<BucketAction> {
        let now = Instant::now();
        let plans = self.plans(keys, only_changed, now);
        let fleets = self.fetch(plans).await;
        self.apply(keys, fleets, only_changed, now)
    }

    /// Each key's plan, the store calls past the budgets deferred.
    fn plans(
        &mut self,
        keys: &[Vec<(String, String)>],
        only_changed: bool,
        now: Instant,
    ) -> Vec<Plan> {
        let mut plans: Vec<Plan> = keys
            .iter()
            .map(|k| self.plan(k, only_changed, now))
            .collect();
        let wanted = plans.iter().filter(|p| matches!(p, Plan::Call(_))).count();
        let mut granted = self.afford(wanted);
        for p in plans.iter_mut().filter(|p| matches!(p, Plan::Call(_))) {
            if granted == 0 {
                if let Plan::Call(u) = p {
                    self.shared.fleets.release(&u.table);
                }
                *p = Plan::Deferred;
            } else {
                granted -= 1;
            }
        }
        plans
    }

    /// Carries out the plans: the store calls in parallel, each fleet read
    /// kept for the other streams of this instance.
    async fn fetch(&self, plans: Vec<Plan>) -> Vec<Got> {
        let shared = &self.shared;
        join_all(plans.into_iter().map(|p| async move {
            match p {
                Plan::Call(u) => {
                    let fleet = shared.store.demand(&u).await;
                    if let Fleet::Members(members) = &fleet {
                        shared
                            .fleets
                            .put(&u.table, members, shared.opts.rebalance / 2);
                    }
                    // Put before released: no stream finds neither.
                    shared.fleets.release(&u.table);
                    Got::Called(fleet)
                }
                Plan::Cached(fleet) => Got::Cached(fleet),
                Plan::Shared(mine, fleet) => Got::Shared(mine, fleet),
                Plan::NoTable => Got::NoTable,
                Plan::Deferred => Got::Deferred,
            }
        }))
        .await
    }

    /// What each key's fleet comes to for Envoy, and the actions to send.
    fn apply(
        &mut self,
        keys: &[Vec<(String, String)>],
        fleets: Vec<Got>,
        only_changed: bool,
        now: Instant,
    ) -> Vec<BucketAction> {
        let ttl = self.shared.opts.assignment_ttl;
        let mut actions = Vec::new();
        for (key, got) in keys.iter().zip(fleets) {
            let Some(b) = self.state.buckets.get_mut(key) else {
                continue;
            };
            let shadow = self.shared.global_shadow;
            let new = match got {
                Got::Called(fleet) => {
                    b.written = Some(now);
                    from_fleet(&mut b.shell.target, self.member, fleet, shadow)
                }
                Got::Cached(fleet) => from_fleet(&mut b.shell.target, self.member, fleet, shadow),
                Got::Shared(mine, fleet) => {
                    b.shell.target.with_share(mine, b.demand, fleet, shadow)
                }
                Got::NoTable => Assignment::AllowAll,
                Got::Deferred => {
                    // Envoy keeps what it holds: renewed when it reports, left
                    // alone by the timer. A new bucket waits for the timer.
                    if let (false, Some(held)) = (only_changed, b.held) {
                        actions.push(assignment(bucket_id(key), &held, ttl));
                    }
                    continue;
                }
            };
            // Learning after a start: the demand is written and the fleet
            // read, but Envoy keeps what it holds (or its no-assignment
            // behaviour) until every Envoy of the fleet has had time to
            // report, so nobody is handed a budget sized for a fleet of one.
            if self.shared.learning(now) {
                continue;
            }
            let push = share::worth_pushing(b.held.as_ref(), &new);
            if only_changed && !push {
                continue;
            }
            let give = match (push, b.held) {
                (false, Some(held)) => held,
                _ => new,
            };
            b.shell.target.assigned(b.held.as_ref(), &give);
            b.held = Some(give);
            actions.push(assignment(bucket_id(key), &give, ttl));
        }
        actions
    }
}

/// What a fleet read comes to for `member` of `target`.
fn from_fleet(target: &mut Target, member: u64, fleet: Fleet, shadow: bool) -> Assignment {
    match fleet {
        Fleet::Allow => Assignment::AllowAll,
        Fleet::Deny => Assignment::DenyAll,
        Fleet::Members(members) => target.assignment(member, &members, shadow),
    }
}
