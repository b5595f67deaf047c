//! The protojson forms of `RateLimitRequest` and `RateLimitResponse` for the
//! `/json` endpoint. envoy-types has no serde support, so the few fields are
//! mapped here, accepting both protojson's camelCase and the proto's
//! snake_case names as protojson parsers do.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor,
    rate_limit_descriptor::{Entry, RateLimitOverride},
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Struct, UInt64Value, Value as PbValue, value::Kind};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::limiter::Unit;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend")]
    hits_addend: Option<Number>,
    #[serde(default, alias = "is_negative_hits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JsonOverride {
    #[serde(default, alias = "requests_per_unit")]
    requests_per_unit: Option<Number>,
    #[serde(default)]
    unit: Option<UnitName>,
}

/// protojson writes 64-bit integers as strings and accepts either.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Text(String),
}

impl Number {
    fn get(&self, field: &str) -> Result<u64, String> {
        match self {
            Number::Int(n) => Ok(*n),
            Number::Text(s) => s
                .parse()
                .map_err(|_| format!("{field}: '{s}' is not an unsigned integer")),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum UnitName {
    Int(i32),
    Text(String),
}

/// Parses protojson into a protobuf request; the error is a readable message.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let r: JsonRequest =
        serde_json::from_slice(body).map_err(|e| format!("invalid RateLimitRequest JSON: {e}"))?;
    let hits_addend = match &r.hits_addend {
        Some(n) => u32::try_from(n.get("hitsAddend")?)
            .map_err(|_| "hitsAddend: out of range".to_owned())?,
        None => 0,
    };
    let descriptors = r
        .descriptors
        .into_iter()
        .map(|d| {
            let limit = d
                .limit
                .map(|l| {
                    let rpu = match &l.requests_per_unit {
                        Some(n) => u32::try_from(n.get("requestsPerUnit")?)
                            .map_err(|_| "requestsPerUnit: out of range".to_owned())?,
                        None => 0,
                    };
                    let unit = match l.unit {
                        None => 0,
                        Some(UnitName::Int(i)) => i,
                        Some(UnitName::Text(t)) => match Unit::parse(&t) {
                            Some(u) => u.proto(),
                            None if t == "UNKNOWN" => 0,
                            None => return Err(format!("limit.unit: unknown unit '{t}'")),
                        },
                    };
                    Ok::<_, String>(RateLimitOverride {
                        requests_per_unit: rpu,
                        unit,
                    })
                })
                .transpose()?;
            let hits_addend = d
                .hits_addend
                .map(|n| n.get("hitsAddend").map(|value| UInt64Value { value }))
                .transpose()?;
            Ok(RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        key: e.key,
                        value: e.value,
                    })
                    .collect(),
                limit,
                hits_addend,
                is_negative_hits: d.is_negative_hits,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(RateLimitRequest {
        domain: r.domain,
        descriptors,
        hits_addend,
    })
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// Renders a response as protojson (default values omitted).
pub fn render_response(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code_name(r.overall_code)));
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            o.insert("code".into(), json!(code_name(s.code)));
            if let Some(l) = &s.current_limit {
                let mut cl = Map::new();
                if !l.name.is_empty() {
                    cl.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    cl.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                let unit = Unit::from_proto(l.unit).map_or("UNKNOWN", Unit::name);
                cl.insert("unit".into(), json!(unit));
                o.insert("currentLimit".into(), Value::Object(cl));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", d.seconds)),
                );
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(md) = &r.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_json(md));
    }
    Value::Object(out)
}

fn struct_json(s: &Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &PbValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_json).collect()),
    }
}

#[cfg(test)]
#[path = "protojson_tests.rs"]
mod tests;
