use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor,
    rate_limit_descriptor::{Entry, RateLimitOverride},
};
use envoy_types::pb::google::protobuf::UInt64Value;

use super::*;

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn rejects_empty_domain_and_descriptors() {
    let r = RateLimitRequest {
        descriptors: vec![descriptor(&[("k", "v")])],
        ..Default::default()
    };
    assert_eq!(Request::try_from(r), Err(RequestError::EmptyDomain));
    let r = RateLimitRequest {
        domain: "d".into(),
        ..Default::default()
    };
    assert_eq!(Request::try_from(r), Err(RequestError::NoDescriptors));
}

#[test]
fn converts_hits_and_overrides() {
    let mut d = descriptor(&[("k", "v")]);
    d.hits_addend = Some(UInt64Value { value: 0 });
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 2,
    });
    let r = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![d, descriptor(&[("a", "")])],
        hits_addend: 0,
    };
    let req = Request::try_from(r).unwrap();
    assert_eq!(req.descriptors[0].hits, 0);
    assert_eq!(
        req.descriptors[0].limit,
        Some(Override {
            requests_per_unit: 3,
            unit: Unit::Minute
        })
    );
    assert_eq!(req.descriptors[1].hits, 1);
    assert_eq!(
        req.descriptors[1].entries,
        [("a".to_owned(), String::new())]
    );
}

#[test]
fn rejects_unknown_override_units() {
    let mut d = descriptor(&[("k", "v")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 0,
    });
    let r = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![d],
        hits_addend: 0,
    };
    assert!(matches!(
        Request::try_from(r),
        Err(RequestError::OverrideUnit { .. })
    ));
}

#[test]
fn every_bound_is_checked_with_its_flag_named() {
    let small = Bounds {
        descriptors: 2,
        entries: 2,
        key_bytes: 8,
        value_bytes: 8,
        descriptor_bytes: 20,
        hits: 10,
    };
    let req = |domain: &str, ds: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: domain.into(),
        descriptors: ds,
        hits_addend: 0,
    };
    let ok = req(
        "d",
        vec![descriptor(&[("k", "v")]), descriptor(&[("k", "12345678")])],
    );
    assert!(Request::parse(ok, &small).is_ok());
    let mut cases: Vec<(RateLimitRequest, &str)> = vec![
        (
            req("d", vec![descriptor(&[("k", "v")]); 3]),
            "--max-descriptors",
        ),
        (
            req("d", vec![descriptor(&[("a", ""), ("b", ""), ("c", "")])]),
            "--max-entries",
        ),
        (
            req("123456789", vec![descriptor(&[("k", "v")])]),
            "--max-key-bytes",
        ),
        (
            req("d", vec![descriptor(&[("123456789", "v")])]),
            "--max-key-bytes",
        ),
        (
            req("d", vec![descriptor(&[("k", "123456789")])]),
            "--max-value-bytes",
        ),
        (
            req(
                "d",
                vec![descriptor(&[("kkkkkkkk", "vvvvvvvv"), ("k", "vvvvvvvv")])],
            ),
            "--max-descriptor-bytes",
        ),
    ];
    let mut many = req("d", vec![descriptor(&[("k", "v")])]);
    many.hits_addend = 11;
    cases.push((many, "--max-hits"));
    let mut d = descriptor(&[("k", "v")]);
    d.hits_addend = Some(UInt64Value { value: 1 << 63 });
    cases.push((req("d", vec![d]), "--max-hits"));
    for (r, flag) in cases {
        let e = Request::parse(r, &small).unwrap_err();
        assert!(e.to_string().contains(flag), "{e}");
    }
}

#[test]
fn any_utf8_value_within_bounds_is_accepted() {
    let r = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![descriptor(&[("k", "_*:\u{0}\n\u{1F600}é/"), ("e", "")])],
        hits_addend: 0,
    };
    let req = Request::try_from(r).unwrap();
    assert_eq!(req.descriptors[0].entries[0].1, "_*:\u{0}\n\u{1F600}é/");
}
