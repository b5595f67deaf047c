//! Matching and validation, on the project's own fixtures.

/// Limit shapes in rule files.
mod shape;

use std::path::Path;

use super::*;
use crate::rule_stats::Detached;

fn compile_one(yaml: &str) -> Rules {
    compile_many(&[("rules.yaml", yaml)], false).unwrap_or_else(|e| panic!("{e}"))
}

fn compile_many(files: &[(&str, &str)], merge: bool) -> Result<Rules, LoadError> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    load_dir(
        dir.path(),
        LoadOptions {
            merge_domains: merge,
            ..LoadOptions::default()
        },
        &Detached,
    )
}

fn errors(yaml: &str) -> Vec<String> {
    match parse_file(Path::new("f.yaml"), yaml) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

/// The matched rule's path and limit for a descriptor, or None.
fn limit(rules: &Rules, entries: &[(&str, &str)]) -> Option<(String, LimitDef)> {
    let d = rules.domain("api").expect("domain api");
    d.find(entries)
        .map(|m| (m.rule.path.to_string(), m.rule.limit))
}

fn per(unit: crate::limiter::Unit, n: u32) -> LimitDef {
    LimitDef::Limited {
        period: crate::limiter::Period::Unit(unit),
        requests_per_unit: n,
        algorithm: crate::limiter::Algorithm::FixedWindow,
    }
}

use crate::limiter::Unit::{Day, Hour, Minute, Second};

const TREE: &str = "
domain: api
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: route
        value: login
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unit: MINUTE, requests_per_unit: 30}
  - key: ip
    value: 10.0.0.2
  - key: plan
    value: gold
    rate_limit: {unit: Day, requests_per_unit: 15}
    descriptors:
      - key: user
        value: u1
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: sso
    rate_limit: {unlimited: true}
  - key: path
    value: /v1/*
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: path
    value: /v1/users*
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: path
    value: /v1/users/me
    rate_limit: {unit: hour, requests_per_unit: 9}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 6}
";

#[test]
fn exact_then_first_wildcard_then_key_only() {
    let r = compile_one(TREE);
    assert_eq!(
        limit(&r, &[("path", "/v1/users/me")]).unwrap().1,
        per(Hour, 9)
    );
    // Both wildcards match; the first declared wins.
    assert_eq!(
        limit(&r, &[("path", "/v1/users/1")]).unwrap().1,
        per(Hour, 7)
    );
    assert_eq!(limit(&r, &[("path", "/v2")]).unwrap().1, per(Hour, 6));
    assert_eq!(limit(&r, &[("ip", "10.0.0.1")]).unwrap().1, per(Minute, 30));
    assert_eq!(
        limit(&r, &[("ip", "1.2.3.4")]).unwrap(),
        ("ip".into(), per(Minute, 20))
    );
}

#[test]
fn a_node_without_limit_or_children_is_a_whitelist() {
    let r = compile_one(TREE);
    assert!(limit(&r, &[("ip", "10.0.0.2")]).is_none());
}

#[test]
fn depth_must_end_at_the_limit() {
    let r = compile_one(TREE);
    // tenant=acme has no limit of its own.
    assert!(limit(&r, &[("tenant", "acme")]).is_none());
    assert_eq!(
        limit(&r, &[("tenant", "acme"), ("route", "x")]).unwrap(),
        ("tenant_acme.route".into(), per(Second, 5))
    );
    assert_eq!(
        limit(&r, &[("tenant", "acme"), ("route", "login")])
            .unwrap()
            .1,
        per(Second, 10)
    );
    // Deeper than the tree: no limit.
    assert!(limit(&r, &[("ip", "1.2.3.4"), ("x", "y")]).is_none());
    assert!(limit(&r, &[("tenant", "acme"), ("route", "x"), ("z", "z")]).is_none());
    // A node with both a limit and children: stopping there uses its limit.
    assert_eq!(limit(&r, &[("plan", "gold")]).unwrap().1, per(Day, 15));
    assert_eq!(
        limit(&r, &[("plan", "gold"), ("user", "u1")]).unwrap().1,
        per(Day, 25)
    );
    assert!(limit(&r, &[("plan", "gold"), ("user", "u2")]).is_none());
    assert!(limit(&r, &[("tenant", "other"), ("route", "x")]).is_none());
    assert!(limit(&r, &[]).is_none());
}

#[test]
fn matching_is_case_sensitive_and_empty_values_fall_back_to_key_only() {
    let r = compile_one(TREE);
    assert_eq!(limit(&r, &[("ip", "")]).unwrap().1, per(Minute, 20));
    assert!(limit(&r, &[("IP", "1.2.3.4")]).is_none());
}

#[test]
fn unlimited_rules_match() {
    let r = compile_one(TREE);
    assert_eq!(limit(&r, &[("sso", "x")]).unwrap().1, LimitDef::Unlimited);
}

#[test]
fn share_threshold_keys_use_the_pattern() {
    let r = compile_one(
        "domain: api\ndescriptors:\n  - key: file\n    value: test1\n    rate_limit: {unit: minute, requests_per_unit: 50}\n  - key: file\n    value: test*\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    );
    let d = r.domain("api").unwrap();
    let m = d.find(&[("file", "test23")]).unwrap();
    assert_eq!(m.shared, [(0, "test*")]);
    let exact = d.find(&[("file", "test1")]).unwrap();
    assert!(exact.shared.is_empty());
    assert_eq!(exact.rule.limit, per(Minute, 50));
}

#[test]
fn detailed_and_value_to_metric_paths_carry_runtime_values() {
    let r = compile_one(
        "domain: api\ndescriptors:\n  - key: a\n    value_to_metric: true\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: c\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    let d = r.domain("api").unwrap();
    assert_eq!(
        d.find(&[("a", "x"), ("b", "y")])
            .unwrap()
            .metric_path
            .as_deref(),
        Some("a_x.b")
    );
    assert_eq!(
        d.find(&[("c", "z")]).unwrap().metric_path.as_deref(),
        Some("c_z")
    );
    assert_eq!(
        d.find(&[("c", "")]).unwrap().metric_path.as_deref(),
        Some("c")
    );
    assert_eq!(
        compile_one(TREE)
            .domain("api")
            .unwrap()
            .find(&[("ip", "1")])
            .unwrap()
            .metric_path,
        None
    );
}

/// The reference's own invalid configs and the words it refuses each with.
const REFERENCE_INVALID: &[(&str, &str)] = &[
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
        "f.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'",
    ),
    ("'''\n", "error loading config file:"),
    (
        "descriptors:\n",
        "f.yaml:1:1: domain: config file cannot have empty domain",
    ),
    (
        "domain: d\ndescriptors:\n  - value: v\n",
        "descriptors[0].key: descriptor has empty key",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n",
        "f.yaml:4:5: descriptors[0].ratelimit: config error, unknown key 'ratelimit'",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
        "config error, unknown key 'requestsperunit'",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimied: true\n",
        "config error, unknown key 'unlimied'",
    ),
    (
        "domain: d\ndescriptors:\n  - a\n  - key: k\n",
        "f.yaml:3:5: descriptors[0]: config error, yaml file contains list of type other than map: a",
    ),
    (
        "0.25: d\ndescriptors:\n",
        "f.yaml:1:1: config error, key is not of type string: 0.25",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
        "descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
        "replaces should not contain name of same descriptor",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
        "f.yaml:6:13: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
        "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1.5}\n",
        "error checking config",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
        "invalid rate limit unit ''",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}\n",
        "error loading config file: -1 is not an unsigned 32-bit integer",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    unit: day\n",
        "config error, unknown key 'unit' at a descriptor",
    ),
];

#[test]
fn reference_invalid_configs_are_rejected_with_its_wording() {
    for (yaml, want) in REFERENCE_INVALID {
        let got = errors(yaml);
        assert_eq!(got.len(), 1, "one error for {yaml:?}: {got:?}");
        assert!(
            got[0].contains(want),
            "{yaml:?}\n  got:  {}\n  want: {want}",
            got[0]
        );
    }
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let got = errors(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n  - key: b\n    rate_limit: {unit: eon}\n",
    );
    assert_eq!(got.len(), 2, "{got:?}");
}

#[test]
fn duplicates_across_levels_domains_and_merged_files() {
    let dup_key = "domain: api\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n";
    let e = compile_many(&[("a.yaml", dup_key)], false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("duplicate descriptor composite key 'api.k_v'"),
        "{e}"
    );
    let nested =
        "domain: api\ndescriptors:\n  - key: p\n    descriptors:\n      - key: c\n      - key: c\n";
    let e = compile_many(&[("a.yaml", nested)], false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("duplicate descriptor composite key 'api.p.c'"),
        "{e}"
    );

    let one = "domain: api\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let two = "domain: api\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n";
    let e = compile_many(&[("a.yaml", one), ("b.yaml", two)], false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("b.yaml: domain: duplicate domain 'api' in config file"),
        "{e}"
    );
    let merged = compile_many(&[("a.yaml", one), ("b.yaml", two)], true).unwrap();
    assert_eq!(limit(&merged, &[("k1", "v1")]).unwrap().1, per(Minute, 10));
    assert_eq!(limit(&merged, &[("k2", "v2")]).unwrap().1, per(Minute, 20));
    let e = compile_many(&[("a.yaml", one), ("c.yaml", one)], true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("c.yaml:3:5: descriptors[0]: duplicate descriptor composite key 'api.k1_v1'"),
        "{e}"
    );
}

#[test]
fn dot_files_and_dot_directories_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("..data")).unwrap();
    std::fs::write(dir.path().join("..data/broken.yaml"), "'''").unwrap();
    std::fs::write(dir.path().join(".hidden.yaml"), "'''").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "'''").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/api.yml"), TREE).unwrap();
    let r = load_dir(dir.path(), LoadOptions::default(), &Detached).unwrap();
    assert_eq!(r.summary(), [("api".to_owned(), 11)]);
}

#[test]
fn empty_and_missing_directories_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_dir(dir.path(), LoadOptions::default(), &Detached).unwrap_err();
    assert!(matches!(e, LoadError::Empty(_)));
    let e = load_dir(&dir.path().join("nope"), LoadOptions::default(), &Detached).unwrap_err();
    assert!(matches!(e, LoadError::Directory(..)));
}

#[test]
fn metadata_is_kept_and_not_checked_against_the_key_list() {
    let r = compile_one(
        "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata:\n      service_with_quota:\n        name: s2\n        weight: 0.5\n",
    );
    let m = r.domain("api").unwrap().find(&[("k", "v")]).unwrap();
    assert!(
        m.rule
            .metadata
            .as_ref()
            .unwrap()
            .fields
            .contains_key("service_with_quota")
    );
}

#[test]
fn rlconfig_dump_is_sorted_in_the_reference_format() {
    let r = compile_one(TREE);
    let dump = r.dump();
    assert!(dump.contains(&"api.ip_10.0.0.1: unit=MINUTE requests_per_unit=30, shadow_mode: false, quota_mode: false".to_owned()));
    let mut sorted = dump.clone();
    sorted.sort();
    assert_eq!(dump, sorted);
}

#[test]
fn detailed_metrics_name_a_shared_level_by_its_pattern() {
    // The reference's stats: `service_svc/*` whatever the runtime value.
    let r = compile_one(
        "domain: api\ndescriptors:\n  - key: service\n    value: svc/*\n    share_threshold: true\n    descriptors:\n      - key: user\n        detailed_metric: true\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
    );
    let d = r.domain("api").unwrap();
    let m = d.find(&[("service", "svc/a1"), ("user", "bob")]).unwrap();
    assert_eq!(m.metric_path.as_deref(), Some("service_svc/*.user_bob"));
}
