//! How rules are read: the flags `serve` and `check` share.

use clap::Args;

use super::heading;

use crate::config::{FileBounds, LoadOptions};

#[derive(Args, Clone)]
pub struct ConfigArgs {
    /// Allow one domain to be spread across several files.
    #[arg(help_heading = heading::RULES, long, env = "SLUICE_MERGE_DOMAINS")]
    pub(crate) merge_domains: bool,
    /// Rule files one load may read; more is a load error.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_RULE_FILES", default_value_t = LoadOptions::default().max_files)]
    pub(crate) max_rule_files: usize,
    /// `unit: month` fixed windows are UTC calendar months (from the 1st to
    /// the next 1st; keys and expiry as the reference's
    /// USE_CALENDAR_MONTH_RATE_LIMIT), not 30 days from the epoch.
    #[arg(help_heading = heading::RULES, long, env = "SLUICE_CALENDAR_MONTHS")]
    pub(crate) calendar_months: bool,
    /// Every fixed window that does not say `count_after: false` (and is not
    /// refundable) counts after: a key is answered from this instance's
    /// credit (--count-after-credit) at local speed and counted in the store
    /// after, so it may pass its limit by up to instances x credit a window.
    /// Off: every count is exact.
    #[arg(help_heading = heading::RULES, long, env = "SLUICE_COUNT_AFTER")]
    pub(crate) count_after: bool,
    /// The largest rule file read, in bytes; a larger one is a load error
    /// naming this flag.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_RULE_FILE_BYTES", default_value_t = FileBounds::default().max_bytes)]
    pub(crate) max_rule_file_bytes: usize,
    /// The most YAML nodes (maps, lists, scalars; a rule is about 10) one
    /// rule file may hold; more is a load error naming this flag.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_RULE_FILE_NODES", default_value_t = FileBounds::default().max_nodes)]
    pub(crate) max_rule_file_nodes: usize,
    /// The nice value (0 to 19) a reload compiles at, or 20 for SCHED_IDLE
    /// (Linux's idle policy, nicer than any nice value). Above 0 a reload takes
    /// the CPU requests leave idle, so requests keep their speed while a big
    /// rule set compiles; on a host whose other processes keep every core
    /// busy it then waits for them, and 0 bounds its time instead.
    #[arg(help_heading = heading::RULES, long, env = "SLUICE_RELOAD_NICE", default_value_t = LoadOptions::default().reload_nice,
          value_parser = clap::value_parser!(u8).range(0..=20))]
    pub(crate) reload_nice: u8,
}

impl ConfigArgs {
    /// How rule directories are loaded.
    pub(crate) fn load_options(&self) -> LoadOptions {
        LoadOptions {
            merge_domains: self.merge_domains,
            max_files: self.max_rule_files,
            leases: true,
            calendar_months: self.calendar_months,
            count_after: self.count_after,
            file_bounds: FileBounds {
                max_bytes: self.max_rule_file_bytes,
                max_nodes: self.max_rule_file_nodes,
            },
            reload_nice: self.reload_nice,
        }
    }
}
