use std::path::{Path, PathBuf};

use super::Overlay;
use crate::config::{LimitDef, LoadError, parse_documents};
use crate::limiter::{Algorithm, Period, Unit};
use crate::store::FailurePolicy;

const PUSHED: &str = "name: gw\ndomain: api\ndescriptors:\n  - key: route\n    value: r1\n    rate_limit: {unit: minute, requests_per_unit: 2, name: per-route}\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 100}\n";

fn overlay(text: &str) -> Result<Overlay, LoadError> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("shapes.yaml"), text).expect("write");
    Overlay::load(dir.path(), 10)
}

fn pushed() -> Vec<(PathBuf, crate::config::DomainFile)> {
    let file = PathBuf::from("xds:gw");
    parse_documents(Path::new("xds:gw"), PUSHED, Default::default())
        .expect("parses")
        .into_iter()
        .map(|df| (file.clone(), df))
        .collect()
}

#[test]
fn a_shape_keeps_the_pushed_number_and_gives_the_window_and_algorithm() {
    let o = overlay("domain: api\ndescriptors:\n  - key: route\n    value: r1\n    rate_limit: {algorithm: sliding_window, window: 10s, on_store_failure: deny}\n    descriptors:\n      - key: user\n        rate_limit: {algorithm: token_bucket, burst: 20}\n").expect("loads");
    let mut files = pushed();
    let warnings = o.apply(&mut files).expect("applies");
    assert!(warnings.is_empty(), "{warnings:?}");
    let route = files[0].1.descriptors[0].rate_limit.clone().expect("limit");
    assert_eq!(
        route.limit,
        LimitDef::Limited {
            requests_per_unit: 2,
            period: Period::Seconds(10),
            algorithm: Algorithm::SlidingWindow,
        }
    );
    assert_eq!(route.on_failure, Some(FailurePolicy::Deny));
    assert_eq!(route.name.as_deref(), Some("per-route"), "the name stays");
    let user = files[0].1.descriptors[0].descriptors[0]
        .rate_limit
        .clone()
        .expect("limit");
    assert_eq!(
        user.limit,
        LimitDef::Limited {
            requests_per_unit: 100,
            period: Period::Unit(Unit::Hour),
            algorithm: Algorithm::token_bucket(100, 3_600, 20),
        },
        "no window: the pushed unit stays"
    );
}

#[test]
fn an_overlay_cannot_change_the_pushed_number_or_hold_a_bad_shape() {
    let e = overlay(
        "domain: api\ndescriptors:\n  - key: route\n    rate_limit: {requests_per_unit: 9}\n",
    )
    .expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains("requests_per_unit comes from the control plane"),
        "{text}"
    );
    assert!(text.contains("shapes.yaml:4"), "with its line: {text}");
    let e =
        overlay("domain: api\ndescriptors:\n  - key: route\n    rate_limit: {algorithm: leaky}\n")
            .expect_err("refused");
    assert!(e.to_string().contains("unknown algorithm 'leaky'"), "{e}");
    let e = overlay("domain: api\ndescriptors:\n  - key: route\n    rate_limit: {burst: 3}\n")
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("burst is only for algorithm: token_bucket"),
        "{e}"
    );
    let e = overlay("domain: api\ndescriptors:\n  - key: route\n    shadow_mode: true\n")
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("unknown key 'shadow_mode' in an overlay"),
        "{e}"
    );
}

#[test]
fn an_entry_that_meets_no_pushed_rule_is_a_warning() {
    let o = overlay("domain: api\ndescriptors:\n  - key: route\n    value: r2\n    rate_limit: {algorithm: sliding_window}\n  - key: route\n    value: r1\n    descriptors:\n      - key: client\n        rate_limit: {algorithm: sliding_window}\n---\ndomain: other\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_window}\n").expect("loads");
    let mut files = pushed();
    let before = files[0].1.clone();
    let warnings = o.apply(&mut files).expect("applies");
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("descriptors[0] (route=r2) meets no rule pushed for domain api")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("(client)")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("domain other")),
        "{warnings:?}"
    );
    assert_eq!(files[0].1, before, "nothing changed");
}
