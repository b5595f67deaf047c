//! The quota filter (`rate_limit_quota`) seen from the rules: its domain,
//! and each bucket its matchers build (`bucket_id_builder`: fixed strings,
//! or a request header's value), reached against the rules as quota mode
//! matches them. A bucket id is a map, so both orders of its entries are
//! tried, as sluice's quota matching does not depend on it for the rules
//! `sluice check --quota` accepts.

use serde_json::Value;

use super::read::Hcm;
use crate::config::{Domain, Shape};

/// One bucket: its entries (key, fixed value or the header it reads).
#[derive(Debug)]
pub(super) struct Bucket {
    pub(super) entries: Vec<(String, Option<String>, Option<String>)>,
}

/// The request headers a quota filter's bucket ids are built from.
pub(super) fn keyed_on(config: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect(config, &mut found);
    found
        .iter()
        .flat_map(|b| b.entries.iter().filter_map(|(_, _, h)| h.clone()))
        .map(|h| h.to_ascii_lowercase())
        .collect()
}

/// The quota filters' domains and buckets.
pub(super) fn buckets(hcm: &Hcm) -> Vec<(String, Vec<Bucket>)> {
    hcm.filters
        .iter()
        .filter(|f| {
            f.is(
                "rate_limit_quota.v3.RateLimitQuotaFilterConfig",
                "envoy.filters.http.rate_limit_quota",
            )
        })
        .map(|f| {
            let domain = f
                .config
                .get("domain")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut found = Vec::new();
            collect(&f.config, &mut found);
            (domain, found)
        })
        .collect()
}

fn collect(v: &Value, out: &mut Vec<Bucket>) {
    match v {
        Value::Object(o) => {
            if let Some(ids) = o
                .get("bucket_id_builder")
                .and_then(|b| b.get("bucket_id_builder"))
                .and_then(Value::as_object)
            {
                let entries = ids
                    .iter()
                    .map(|(k, b)| {
                        let fixed = b
                            .get("string_value")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        let header = b
                            .pointer("/custom_value/typed_config/header_name")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        (k.clone(), fixed, header)
                    })
                    .collect();
                out.push(Bucket { entries });
            }
            o.values().for_each(|v| collect(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The rule paths a bucket reaches (trying its entries as written, then
/// reversed), or none.
pub(super) fn reach(domain: &Domain, b: &Bucket) -> Vec<String> {
    let shape = |entries: Vec<&(String, Option<String>, Option<String>)>| -> Vec<String> {
        let s: Vec<(&str, Shape<'_>)> = entries
            .iter()
            .map(|(k, v, _)| {
                (
                    k.as_str(),
                    v.as_deref().map_or(Shape::Runtime, Shape::Fixed),
                )
            })
            .collect();
        let r = domain.reach(&s);
        r.general
            .iter()
            .chain(r.specific.iter().map(|(_, r)| r))
            .map(|r| r.path.to_string())
            .collect()
    };
    let forward = shape(b.entries.iter().collect());
    if forward.is_empty() {
        shape(b.entries.iter().rev().collect())
    } else {
        forward
    }
}
