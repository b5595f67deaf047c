//! The rules every instance of the fleet decides by, each of its own
//! kind, and their text (as a file, or pushed over xDS by `xds.rs`).

use super::store::Backend;

/// The rules every instance decides by: (key, limit, window in ms). Each
/// request names one key with a value (its counter). `d` is never reached:
/// its windows are all admitted, so a reference's key must hold their hits.
/// The first four are plain fixed windows; the rest are of their own kind
/// ([`SHADOW`], [`REFUNDABLE`], [`SLIDING`], [`BUCKET`], [`AFTER`]) or
/// limit (`e`, 1).
pub const RULES: [(&str, u32, u64); 10] = [
    ("a", 5, 1_000),
    ("b", 20, 1_000),
    ("c", 40, 2_000),
    ("d", 10_000, 1_000),
    (SHADOW, 5, 1_000),
    (REFUNDABLE, 10, 1_000),
    ("e", 1, 1_000),
    (SLIDING, 10, 1_000),
    (BUCKET, 10, 1_000),
    (AFTER, 20, 1_000),
];

/// A `shadow_mode: true` rule: never refuses, whatever its count.
pub const SHADOW: &str = "s";
/// A `refundable: true` rule: clients give back half of what it admits.
pub const REFUNDABLE: &str = "r";
/// A sliding window: the two-window estimate within the limit, so a fixed
/// window's admitted hits within it too.
pub const SLIDING: &str = "w";
/// A token bucket (`burst` the limit): `burst + rate × s`, so at most twice
/// the limit in a window.
pub const BUCKET: &str = "k";
/// A rule that counts after (`count_after: true`): each instance answers
/// it on its credit, [`AFTER_CREDIT`] hits, before the store counts them.
pub const AFTER: &str = "f";
/// `--count-after-credit 20`: 4 hits of `f`'s 20.
pub const AFTER_CREDIT: u64 = 4;

/// A concurrency rule (`conc`, then the slot's own entry), `max_in_flight`
/// of it; memcached holds no slots, so its fleets have none.
/// Four clients contend for its two slots, on one counter.
pub const CONCURRENCY: (&str, u32) = ("conc", 2);

/// The concurrency rule's `lease`: a slot not given back returns after it,
/// counted from when the store took it.
pub const SLOT_LEASE_MS: u64 = 3_000;

/// The limit `a` takes on a reload, and back.
pub const RELOADED: u32 = 8;

/// `--redis-timeout` of the fleet: the bound on any store wait.
pub const STORE_TIMEOUT_MS: u64 = 50;

pub fn rules_text(a_limit: u32, backend: Backend) -> String {
    let mut s = "domain: chaos\ndescriptors:\n".to_owned();
    for (key, limit, window) in RULES {
        let limit = if key == "a" { a_limit } else { limit };
        // A unit where there is one, so the reference's key format names
        // the counter as the reference would.
        let period = if window == 1_000 {
            "unit: second".to_owned()
        } else {
            format!("window: {}s", window / 1000)
        };
        let extra = match key {
            REFUNDABLE => ", refundable: true",
            SLIDING => ", algorithm: sliding_window",
            BUCKET => ", algorithm: token_bucket",
            AFTER => ", count_after: true",
            _ => "",
        };
        s.push_str(&format!(
            "  - key: {key}\n    rate_limit: {{{period}, requests_per_unit: {limit}{extra}}}\n"
        ));
        if key == SHADOW {
            s.push_str("    shadow_mode: true\n");
        }
    }
    if backend.slots() {
        let ((key, max), lease) = (CONCURRENCY, SLOT_LEASE_MS / 1000);
        s.push_str(&format!(
            "  - key: {key}\n    descriptors:\n      - key: slot\n        rate_limit: {{algorithm: concurrency, max_in_flight: {max}, lease: {lease}s}}\n"
        ));
    }
    // The request flood's counter: a limit no flood reaches, so every
    // flooded request asks the store.
    s.push_str("  - key: flood\n    rate_limit: {unit: second, requests_per_unit: 100000000}\n");
    s
}
