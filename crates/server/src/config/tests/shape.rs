//! Limit shapes in rule files: what loads, what is refused with file, line
//! and field, and how `/rlconfig` shows it.

use std::path::Path;

use super::super::*;
use crate::limiter::Unit;

fn errors(yaml: &str) -> Vec<String> {
    match parse_file(Path::new("f.yaml"), yaml) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

fn limit_of(yaml: &str) -> LimitDef {
    let f = parse_file(Path::new("f.yaml"), yaml).unwrap_or_else(|e| panic!("{e:?}"));
    f.descriptors[0].rate_limit.as_ref().unwrap().limit
}

/// One file `yaml` loaded as a directory.
fn load(yaml: &str) -> Rules {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d.yaml"), yaml).unwrap();
    load_dir(
        dir.path(),
        LoadOptions::default(),
        &crate::rule_stats::Detached,
    )
    .unwrap()
}

fn rule(body: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{body}}}\n")
}

#[test]
fn shapes_and_windows_load() {
    assert_eq!(
        limit_of(&rule(
            "window: 90s, requests_per_unit: 30, algorithm: sliding_window"
        )),
        LimitDef::Limited {
            requests_per_unit: 30,
            period: Period::Seconds(90),
            algorithm: Algorithm::SlidingWindow,
        }
    );
    assert_eq!(
        limit_of(&rule(
            "unit: minute, requests_per_unit: 30, algorithm: token_bucket, burst: 10"
        )),
        LimitDef::Limited {
            requests_per_unit: 30,
            period: Period::Unit(Unit::Minute),
            algorithm: Algorithm::token_bucket(30, 60, 10),
        }
    );
    // burst defaults to requests_per_unit.
    assert_eq!(
        limit_of(&rule(
            "unit: second, requests_per_unit: 7, algorithm: token_bucket"
        )),
        LimitDef::Limited {
            requests_per_unit: 7,
            period: Period::Unit(Unit::Second),
            algorithm: Algorithm::token_bucket(7, 1, 7),
        }
    );
    for (w, secs) in [
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86_400),
        ("366d", 31_622_400),
        ("1s", 1),
    ] {
        assert_eq!(
            limit_of(&rule(&format!("window: {w}, requests_per_unit: 1"))),
            LimitDef::Limited {
                requests_per_unit: 1,
                period: Period::Seconds(secs),
                algorithm: Algorithm::FixedWindow,
            },
            "{w}"
        );
    }
}

#[test]
fn bad_shapes_are_refused_with_line_and_field() {
    let cases = [
        (
            "unit: minute, window: 60s, requests_per_unit: 1",
            "both unit and window",
        ),
        ("window: 0s, requests_per_unit: 1", "invalid window"),
        ("window: 367d, requests_per_unit: 1", "invalid window"),
        ("window: 1.5m, requests_per_unit: 1", "invalid window"),
        ("window: 10w, requests_per_unit: 1", "invalid window"),
        (
            "unit: minute, requests_per_unit: 1, algorithm: leaky",
            "unknown algorithm 'leaky'",
        ),
        (
            "unit: minute, requests_per_unit: 1, overdraft: true",
            "overdraft is only for algorithm: token_bucket",
        ),
        (
            "unit: minute, requests_per_unit: 1, burst: 5",
            "burst is only for algorithm: token_bucket",
        ),
        (
            "unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 0",
            "burst must be at least 1",
        ),
    ];
    for (body, want) in cases {
        let e = errors(&rule(body));
        assert_eq!(e.len(), 1, "{body}: {e:?}");
        assert!(e[0].contains(want), "{body}: {e:?}");
        assert!(e[0].starts_with("f.yaml:4:"), "{e:?}");
        assert!(e[0].contains("descriptors[0].rate_limit."), "{e:?}");
    }
}

#[test]
fn rlconfig_shows_every_shape() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: {window: 90s, requests_per_unit: 30, algorithm: sliding_window}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 9}\n";
    let r = load(yaml);
    let dump = r.dump().join("\n");
    assert!(
        dump.contains("d.a: unit=MINUTE requests_per_unit=3, shadow_mode"),
        "{dump}"
    );
    assert!(
        dump.contains("d.b: window=90s requests_per_unit=30 algorithm=sliding_window,"),
        "{dump}"
    );
    assert!(
        dump.contains("d.c: unit=SECOND requests_per_unit=5 algorithm=token_bucket burst=9,"),
        "{dump}"
    );
}

#[test]
fn several_limits_and_a_failure_policy_per_rule() {
    let yaml = "domain: d\ndescriptors:\n  - key: api_key\n    rate_limits:\n      - {requests_per_unit: 10, unit: second, name: burst}\n      - {requests_per_unit: 10000, unit: day, name: daily, on_store_failure: deny}\n";
    let f = parse_file(Path::new("f.yaml"), yaml).unwrap();
    let d = &f.descriptors[0];
    assert!(d.rate_limit.is_none());
    assert_eq!(d.rate_limits.len(), 2);
    assert_eq!(
        d.rate_limits[1].on_failure,
        Some(crate::store::FailurePolicy::Deny)
    );
    let r = load(yaml);
    let dump = r.dump().join("\n");
    assert!(
        dump.contains("d.api_key:burst: unit=SECOND requests_per_unit=10,"),
        "{dump}"
    );
    assert!(
        dump.contains("d.api_key:daily: unit=DAY requests_per_unit=10000 on_store_failure=deny,"),
        "{dump}"
    );
    let m = r.domain("d").unwrap().find(&[("api_key", "x")]).unwrap();
    assert_eq!(m.rule.also.len(), 1);
}

#[test]
fn bad_limit_lists_and_policies_are_refused() {
    let both = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: day, requests_per_unit: 1}\n";
    let e = errors(both);
    assert!(
        e.iter()
            .any(|e| e.contains("either rate_limit or rate_limits")),
        "{e:?}"
    );
    let empty = "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n";
    assert!(
        errors(empty)
            .iter()
            .any(|e| e.contains("must not be empty"))
    );
    let e = errors(&rule(
        "unit: second, requests_per_unit: 1, on_store_failure: maybe",
    ));
    assert!(
        e.iter()
            .any(|e| e.contains("unknown on_store_failure 'maybe'")),
        "{e:?}"
    );
}

#[test]
fn a_concurrency_rule_takes_max_in_flight_and_a_lease_and_nothing_else() {
    assert_eq!(
        limit_of(&rule(
            "algorithm: concurrency, max_in_flight: 3, lease: 60s"
        )),
        LimitDef::Limited {
            requests_per_unit: 3,
            period: Period::Seconds(60),
            algorithm: Algorithm::Concurrency,
        }
    );
    for (body, said) in [
        ("algorithm: concurrency, lease: 60s", "needs max_in_flight"),
        ("algorithm: concurrency, max_in_flight: 3", "needs lease"),
        (
            "algorithm: concurrency, max_in_flight: 0, lease: 1m",
            "at least 1",
        ),
        (
            "algorithm: concurrency, max_in_flight: 3, lease: 60s, unit: minute",
            "unit is not for",
        ),
        (
            "algorithm: concurrency, max_in_flight: 3, lease: 60s, requests_per_unit: 5",
            "requests_per_unit is not for",
        ),
        (
            "unit: minute, requests_per_unit: 5, max_in_flight: 3",
            "only for algorithm: concurrency",
        ),
        (
            "unit: minute, requests_per_unit: 5, lease: 60s",
            "only for algorithm: concurrency",
        ),
    ] {
        let e = errors(&rule(body));
        assert!(e.iter().any(|m| m.contains(said)), "{body}: {e:?}");
    }
    // On a store without leases (memcached), refused when the rules load.
    let dir = tempfile::tempdir().unwrap();
    let yaml = rule("algorithm: concurrency, max_in_flight: 3, lease: 60s");
    std::fs::write(dir.path().join("d.yaml"), yaml).unwrap();
    let opts = LoadOptions {
        leases: false,
        ..LoadOptions::default()
    };
    let e = load_dir(dir.path(), opts, &crate::rule_stats::Detached).unwrap_err();
    assert!(e.to_string().contains("memcached holds no leases"), "{e}");
}
