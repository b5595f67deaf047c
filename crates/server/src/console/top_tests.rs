use super::*;
use crate::limiter::Unit;

fn key(entries: &[(&str, &str)]) -> CounterKey {
    CounterKey::new("api", Unit::Minute, entries.iter().copied())
}

#[test]
fn heavy_hitters_come_first() {
    let top = TopKeys::new(8, false);
    for i in 0..100u64 {
        top.record(&key(&[("user", "alice")]), "per_user", 1, 1000);
        top.record(&key(&[("user", &format!("u{i}"))]), "per_user", 1, 1000);
    }
    let got = top.top(3, 1000);
    assert_eq!(got[0].key, "api per_user: user=alice");
    assert!(got[0].over_limit >= 100);
}

#[test]
fn a_million_distinct_keys_stay_within_the_bound() {
    let top = TopKeys::new(64, false);
    let long = "v".repeat(4000);
    for i in 0..1_000_000u64 {
        // Spread over two generations and two sizes of key.
        let v = if i % 1000 == 0 {
            long.clone()
        } else {
            i.to_string()
        };
        top.record(&key(&[("k", &v)]), "rule", 1, 1000 + i / 20_000);
    }
    let (slots, bytes) = top.footprint();
    assert!(slots <= 2 * 64, "{slots} slots");
    assert!(bytes <= 2 * 64 * MAX_TEXT, "{bytes} bytes of text");
    assert!(top.top(100, 1050).len() <= 128);
}

#[test]
fn addresses_are_masked_unless_shown() {
    let k = key(&[
        ("masked_remote_address", "203.0.113.7/32"),
        ("v6", "2001:db8:1:2::9"),
    ]);
    let masked = TopKeys::new(4, false);
    masked.record(&k, "per_ip", 1, 0);
    let text = &masked.top(1, 0)[0].key;
    assert!(text.contains("masked_remote_address=203.0.x.x~"), "{text}");
    assert!(text.contains("v6=2001:db8:…~"), "{text}");
    assert!(
        !text.contains("113.7") && !text.contains("1:2::9"),
        "{text}"
    );
    let shown = TopKeys::new(4, true);
    shown.record(&k, "per_ip", 1, 0);
    assert!(shown.top(1, 0)[0].key.contains("203.0.113.7/32"));
}

#[test]
fn the_top_forgets_after_a_minute() {
    let top = TopKeys::new(4, false);
    top.record(&key(&[("k", "a")]), "r", 5, 1000);
    assert_eq!(top.top(5, 1020).len(), 1);
    assert_eq!(top.top(5, 1045).len(), 1);
    assert!(top.top(5, 1100).is_empty());
    // A new generation keeps the previous one's counts visible.
    top.record(&key(&[("k", "b")]), "r", 1, 1100);
    top.record(&key(&[("k", "a")]), "r", 1, 1131);
    let got = top.top(5, 1131);
    assert_eq!(got.len(), 2, "{got:?}");
}
