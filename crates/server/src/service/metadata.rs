//! `dynamic_metadata` in the reference's shape: the request's domain and
//! descriptors, and the deep merge of the config `metadata` of every counted
//! descriptor that was not over its limit (the first value wins a conflict).

use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

use crate::request::Request;

fn string(s: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn object(s: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(s)),
    }
}

pub fn build(req: &Request, passed: &[&Struct]) -> Struct {
    let descriptors = req
        .descriptors
        .iter()
        .map(|d| {
            let mut s = Struct::default();
            let entries = d
                .entries
                .iter()
                .map(|(k, v)| string(format!("{k}={v}")))
                .collect();
            s.fields.insert(
                "entries".into(),
                Value {
                    kind: Some(Kind::ListValue(ListValue { values: entries })),
                },
            );
            if let Some(l) = d.limit {
                let text = format!("requests_per_unit:{} unit:{}", l.requests_per_unit, l.unit);
                s.fields.insert("limit".into(), string(text));
            }
            if let Some(h) = d.hits_addend {
                s.fields.insert("hitsAddend".into(), number(h as f64));
            }
            object(s)
        })
        .collect();
    let mut out = Struct::default();
    out.fields
        .insert("domain".into(), string(req.domain.clone()));
    out.fields.insert(
        "descriptors".into(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if req.hits_addend != 0 {
        out.fields
            .insert("hitsAddend".into(), number(f64::from(req.hits_addend)));
    }
    if !passed.is_empty() {
        let mut merged = Struct::default();
        for md in passed {
            merge(&mut merged, md);
        }
        out.fields.insert("metadata".into(), object(merged));
    }
    out
}

fn merge(into: &mut Struct, from: &Struct) {
    for (k, v) in &from.fields {
        match (into.fields.get_mut(k), &v.kind) {
            (None, _) => {
                into.fields.insert(k.clone(), v.clone());
            }
            (
                Some(Value {
                    kind: Some(Kind::StructValue(existing)),
                }),
                Some(Kind::StructValue(incoming)),
            ) => merge(existing, incoming),
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
