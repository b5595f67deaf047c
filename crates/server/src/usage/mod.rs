//! Limits chosen with evidence, as reports: `/api/usage`, `sluice advise`
//! and a fleet's reports merged ([`fleet`]). What they read (usage levels,
//! each limit's history, what a limit would refuse) is counted in the core
//! ([`sluice_core::usage`], re-exported here).

pub mod fleet;
mod report;

pub use report::advice_table;
pub(crate) use report::{domain_report, limit_report};
pub use sluice_core::usage::*;
