//! What decides when the shared store cannot: `--store-failure`, or a
//! rule's `on_store_failure`.

/// What decides a request the shared store could not count (`--store-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
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
