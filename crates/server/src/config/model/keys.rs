//! The keys a rule file may use.

/// The reference's flat allow-list of keys: any other key, at any depth outside
/// `metadata`, is an error.
pub const VALID_KEYS: [&str; 27] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // sluice's extensions of rate_limit (limit shapes).
    "window",
    "algorithm",
    "burst",
    "overdraft",
    "on_store_failure",
    "rate_limits",
    "refundable",
    "max_in_flight",
    "lease",
    "leased_allowance",
    "count_after",
];
