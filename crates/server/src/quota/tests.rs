/// Quota mode on a simulated fleet.
mod sim;

use super::*;

#[test]
fn the_defaults_rewrite_every_entry_within_a_third_of_the_ttl() {
    assert!(QuotaOptions::default().store_rate_shortfalls().is_empty());
    let crowded = QuotaOptions {
        max_total_buckets: 100_000,
        ..QuotaOptions::default()
    };
    let lines = crowded.store_rate_shortfalls();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("takes 50 s"), "{lines:?}");
}
