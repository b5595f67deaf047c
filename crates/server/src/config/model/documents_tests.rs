use std::path::PathBuf;

use crate::config::{LoadOptions, Rules, load_texts};
use crate::rule_stats::Detached;

fn load(text: &str) -> Result<Rules, crate::config::LoadError> {
    let files = vec![(PathBuf::from("f.yaml"), text.to_owned())];
    load_texts(files, LoadOptions::default(), &Detached)
}

/// Rule files as control planes write them (Envoy Gateway): a `name:`
/// at the top, `rate_limit: null` on inner levels, `value: ""` (any
/// value, as the reference reads it), and several configs in one file.
#[test]
fn files_as_envoy_gateway_writes_them_mean_what_the_reference_reads() {
    let rules = load("name: gw\ndomain: api\ndescriptors:\n  - key: route\n    value: r1\n    rate_limit: null\n    descriptors:\n      - key: user\n        value: \"\"\n        rate_limit: {unit: minute, requests_per_unit: 2}\n---\nname: other\ndomain: second\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
            .expect("loads");
    let api = rules.domain("api").expect("api");
    let found = api
        .find(&[("route", "r1"), ("user", "bob")])
        .expect("any user");
    assert_eq!(&*found.rule.path, "route_r1.user");
    assert!(
        api.find(&[("route", "r1")]).is_none(),
        "null: no limit above"
    );
    assert!(rules.domain("second").is_some(), "the second document");
    // Empty and absent values are one key: two of them collide.
    let dup = load(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: user\n    value: \"\"\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
    );
    assert!(dup.is_err_and(|e| e.to_string().contains("duplicate")));
    let two = super::parse_file(
        std::path::Path::new("f.yaml"),
        "domain: a\n---\ndomain: b\n",
    );
    assert!(two.is_err_and(|e| e[0].to_string().contains("2 YAML documents")));
}
