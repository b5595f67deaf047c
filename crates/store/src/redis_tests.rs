//! Key rendering, masking and seeds.

use super::*;
use crate::CounterKey;
use crate::limiter::{Algorithm, Now, Unit, Window};

#[test]
fn passwords_are_masked() {
    assert_eq!(
        mask("rediss://app:s3cret@cache:6380/0"),
        "rediss://app:***@cache:6380/0"
    );
    assert_eq!(
        mask("redis://:s3cret@cache:6379"),
        "redis://:***@cache:6379"
    );
    assert_eq!(mask("redis://cache:6379"), "redis://cache:6379");
    let t = RedisTarget::Cluster(vec!["redis://u:p@a:7000".into(), "b:7001".into()]);
    assert!(!format!("{t} {t:?}").contains(":p@"));
}

#[test]
fn cluster_seeds_inherit_scheme_and_credentials() {
    let t = RedisTarget::Cluster(vec!["rediss://u:p@a:7000".into(), "b:7001".into()]);
    assert_eq!(seeds(&t), ["rediss://u:p@a:7000", "rediss://u:p@b:7001"]);
    let t = RedisTarget::Cluster(vec!["a:7000".into(), "b:7001".into()]);
    assert_eq!(seeds(&t), ["redis://a:7000", "redis://b:7001"]);
}

#[test]
fn key_formats() {
    let k = CounterKey::new("domain", Unit::Second, [("key", "value")]);
    let w = Window::containing(Unit::Second, Now(1234));
    assert_eq!(
        fixed("", KeyFormat::Envoyproxy, &k, w.start.0, "SECOND"),
        "domain_key_value_1234"
    );
    assert_eq!(
        fixed("prefix:", KeyFormat::Envoyproxy, &k, 1234, "SECOND"),
        "prefix:domain_key_value_1234"
    );
    let two = CounterKey::new(
        "domain",
        Unit::Minute,
        [("key2", "value2"), ("subkey2", "subvalue2")],
    );
    assert_eq!(
        fixed("", KeyFormat::Envoyproxy, &two, 1200, "MINUTE"),
        "domain_key2_value2_subkey2_subvalue2_1200"
    );
    let s = fixed("p:", KeyFormat::Sluice, &k, 1234, "SECOND");
    assert!(s.starts_with("p:domain:SECOND:1234:"), "{s}");
    assert_eq!(s.len(), "p:domain:SECOND:1234:".len() + 32);
    let email = CounterKey::new("d", Unit::Hour, [("email", "a@example.com")]);
    assert!(!fixed("", KeyFormat::Sluice, &email, 0, "HOUR").contains("example"));
    // Values that collide in the reference's format do not in sluice's.
    let a = CounterKey::new("d", Unit::Hour, [("a", "b_c")]);
    let b = CounterKey::new("d", Unit::Hour, [("a_b", "c")]);
    assert_eq!(
        fixed("", KeyFormat::Envoyproxy, &a, 0, "HOUR"),
        fixed("", KeyFormat::Envoyproxy, &b, 0, "HOUR")
    );
    assert_ne!(
        fixed("", KeyFormat::Sluice, &a, 0, "HOUR"),
        fixed("", KeyFormat::Sluice, &b, 0, "HOUR")
    );
}

/// A fixed window's key.
fn fixed(prefix: &str, format: KeyFormat, key: &CounterKey, start: u64, unit: &str) -> String {
    render_key(prefix, format, key, Algorithm::FixedWindow, start, unit)
}
