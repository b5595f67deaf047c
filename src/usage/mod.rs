//! Limits chosen with evidence, as reports: `/api/usage`, `sluice advise`
//! and a fleet's reports merged ([`fleet`]). What they read (usage levels,
//! each limit's history, what a limit would refuse) is counted in the core
//! ([`sluice_core::usage`], re-exported here).

pub(crate) mod fleet;
mod report;

pub(crate) use report::{advice_table, domain_report, limit_report};
pub use sluice_core::usage::*;

use crate::limiter::Tally;
use crate::rule_stats::RuleStats;
use crate::store::{CountedLate, Increment};

/// A shadow-mode rule's hits answered from the over-limit cache reach its
/// usage when the store has counted them.
impl CountedLate for RuleStats {
    fn counted_late(&self, inc: &Increment, tally: Tally) {
        if let Some((before, after, hits)) = crossing(tally, inc.hits, false) {
            let window = inc.window.period.seconds();
            self.usage
                .record(window, inc.at_us / 1_000_000, before, after, hits);
        }
    }
}
