//! What decides when the shared store cannot: `--store-failure`, or a
//! rule's `on_store_failure`; and what decides a request sluice sheds
//! because it is too busy to ask the store in time.

use super::{Increment, StoreError};
use crate::limiter::{Decision, Tally};

/// What decides a request the shared store could not count (`--store-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Count in this process's memory: limits stay enforced per instance.
    #[default]
    Fallback,
    /// Admit.
    Allow,
    /// Answer OVER_LIMIT.
    Deny,
}

impl FailurePolicy {
    pub fn name(self) -> &'static str {
        match self {
            FailurePolicy::Fallback => "fallback",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Deny => "deny",
        }
    }

    /// A policy by its name in rule files (`on_store_failure`).
    pub fn parse(s: &str) -> Option<FailurePolicy> {
        [
            FailurePolicy::Fallback,
            FailurePolicy::Allow,
            FailurePolicy::Deny,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    pub(super) fn in_use(self) -> &'static str {
        match self {
            FailurePolicy::Fallback => "memory-fallback",
            FailurePolicy::Allow => "allow-all",
            FailurePolicy::Deny => "deny-all",
        }
    }
}

/// Tallies for a request sluice sheds (too busy to ask the store in time):
/// a rule's own `on_store_failure` of deny or allow decides it, so deny
/// routes stay closed; otherwise the request gets no decision
/// ([`StoreError::Busy`], which Envoy's failure mode decides). Never the
/// memory fallback: being busy must not move counting onto one instance.
pub fn shed<'a>(
    batch: impl IntoIterator<Item = &'a Increment>,
    why: &str,
) -> Result<Vec<Tally>, StoreError> {
    let mut denied = false;
    let mut undecided = false;
    let tallies = batch
        .into_iter()
        .map(|i| match i.on_failure {
            Some(FailurePolicy::Deny) if !i.refund => {
                denied = true;
                Tally::Decided(Decision::Refuse)
            }
            Some(FailurePolicy::Allow | FailurePolicy::Deny) => Tally::Decided(Decision::Admit),
            _ => {
                undecided = true;
                Tally::Decided(Decision::Admit)
            }
        })
        .collect();
    // A refusal decides the request whatever else it carries.
    if undecided && !denied {
        return Err(StoreError::Busy(why.to_owned()));
    }
    Ok(tallies)
}
