//! A rule's `metadata` as the protobuf `Struct` Envoy receives.

use std::collections::BTreeMap;

use crate::config::yaml::Location;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as PbValue, value::Kind};

use super::{Node, Value};

pub(super) fn to_pb(node: &Node) -> Result<PbValue, (Location, String)> {
    let kind = match &node.value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Int(i) => Kind::NumberValue(*i as f64),
        Value::Float(x) => Kind::NumberValue(*x),
        Value::Str(s) => Kind::StringValue(s.clone()),
        Value::Seq(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_pb).collect::<Result<_, _>>()?,
        }),
        Value::Map(entries) => {
            let mut fields = BTreeMap::new();
            for (k, v) in entries {
                let Value::Str(key) = &k.value else {
                    return Err((k.referenced, format!("key {} is not a string", k.value)));
                };
                fields.insert(key.clone(), to_pb(v)?);
            }
            Kind::StructValue(Struct {
                fields: fields.into_iter().collect(),
            })
        }
    };
    Ok(PbValue { kind: Some(kind) })
}
