//! Bucket ids (maps) against rule trees (paths).

use super::super::{LoadOptions, Rules, load_dir};
use crate::rule_stats::Detached;

fn rules(yaml: &str) -> Rules {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), yaml).unwrap();
    load_dir(dir.path(), LoadOptions::default(), &Detached).unwrap()
}

fn found(r: &Rules, entries: &[(&str, &str)]) -> Option<(String, Vec<(String, String)>)> {
    let mut sorted = entries.to_vec();
    sorted.sort_unstable();
    r.domain("api")
        .unwrap()
        .find_bucket(&sorted)
        .map(|m| (m.rule.label.to_string(), m.path))
}

const TREE: &str = r#"
domain: api
descriptors:
  - key: tier
    value: tenant
    descriptors:
      - key: tenant
        value: gold
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: tier
    value: shared
    descriptors:
      - key: tenant
        share_threshold: true
        value: team*
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tier
    value: free
    rate_limit: {unlimited: true}
"#;

#[test]
fn a_map_walks_the_tree_whatever_its_order() {
    let r = rules(TREE);
    let (label, path) = found(&r, &[("tenant", "acme"), ("tier", "tenant")]).unwrap();
    assert_eq!(label, "tier_tenant.tenant");
    assert_eq!(
        path,
        vec![
            ("tier".to_owned(), "tenant".to_owned()),
            ("tenant".to_owned(), "acme".to_owned())
        ]
    );
    // Exact value beats the key-only default.
    let (label, _) = found(&r, &[("tier", "tenant"), ("tenant", "gold")]).unwrap();
    assert_eq!(label, "tier_tenant.tenant_gold");
}

#[test]
fn every_entry_must_be_used_and_the_path_must_end_at_a_limit() {
    let r = rules(TREE);
    // An entry the tree never names: no limit.
    assert!(found(&r, &[("tier", "tenant"), ("tenant", "a"), ("x", "y")]).is_none());
    // Ends above the limit.
    assert!(found(&r, &[("tier", "tenant")]).is_none());
    assert!(found(&r, &[]).is_none());
    // Unlimited is still a match (the caller allows all).
    let (label, _) = found(&r, &[("tier", "free")]).unwrap();
    assert_eq!(label, "tier_free");
}

#[test]
fn shared_levels_key_the_budget_by_their_pattern() {
    let r = rules(TREE);
    let (_, a) = found(&r, &[("tier", "shared"), ("tenant", "team-a")]).unwrap();
    let (_, b) = found(&r, &[("tier", "shared"), ("tenant", "team-b")]).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[1].1, "team*");
}

#[test]
fn too_many_entries_match_nothing() {
    let r = rules(TREE);
    let many: Vec<(String, String)> = (0..17).map(|i| (format!("k{i:02}"), "v".into())).collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert!(r.domain("api").unwrap().find_bucket(&refs).is_none());
}

#[test]
fn ambiguities_are_named() {
    let r = rules(TREE);
    assert!(r.domain("api").unwrap().quota_ambiguities().is_empty());
    let r = rules(
        r#"
domain: api
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    value: x
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: b
    value: y
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 3}
"#,
    );
    let found = r.domain("api").unwrap().quota_ambiguities();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .any(|l| l.contains("'a.b'") && l.contains("'b_x.a'"))
    );
    assert!(found.iter().any(|l| l.contains("twice")));
    // a then b wins: keys taken in name order.
    let mut e = vec![("b", "x"), ("a", "1")];
    e.sort_unstable();
    let m = r.domain("api").unwrap().find_bucket(&e).unwrap();
    assert_eq!(&*m.rule.label, "a.b");
}

#[test]
fn exact_values_that_differ_are_not_ambiguous() {
    let r = rules(
        r#"
domain: api
descriptors:
  - key: a
    value: "1"
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    value: x
    descriptors:
      - key: a
        value: "2"
        rate_limit: {unit: second, requests_per_unit: 2}
"#,
    );
    assert!(r.domain("api").unwrap().quota_ambiguities().is_empty());
}

/// Thousands of exact per-customer rules in two key orders: only the pair
/// that names the same values is ambiguous (found by values, not by pairs).
#[test]
fn many_exact_rules_in_two_orders_find_only_the_pair_that_agrees() {
    let mut yaml = String::from("domain: api\ndescriptors:\n");
    for i in 0..2_000 {
        yaml.push_str(&format!("  - key: org\n    value: o{i}\n    descriptors:\n      - key: user\n        value: u{i}\n        rate_limit: {{unit: second, requests_per_unit: 1}}\n"));
    }
    for i in 1_999..4_000 {
        yaml.push_str(&format!("  - key: user\n    value: u{i}\n    descriptors:\n      - key: org\n        value: o{i}\n        rate_limit: {{unit: second, requests_per_unit: 1}}\n"));
    }
    let found = rules(&yaml).domain("api").unwrap().quota_ambiguities();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("'org_o1999.user_u1999'") && found[0].contains("'user_u1999.org_o1999'"),
        "{found:?}"
    );
}
