//! The fleet's usage from its instances' answers: each instance's figures
//! are its share of the fleet's (every level of every key is crossed by
//! exactly one instance), so `sluice advise` over several admin ports sums
//! each rule's distribution and answers from the sum.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::levels;
use super::report::{distribution, refused_by, summary};

/// One rule over the fleet: its first answer, and the sums.
struct Summed {
    first: Value,
    keys: Vec<i64>,
    hits: u64,
}

/// The domains of one `/api/usage` answer (one domain, or all).
fn domains(doc: &Value) -> Vec<Value> {
    match doc.get("domains").and_then(Value::as_array) {
        Some(all) => all.clone(),
        None => vec![doc.clone()],
    }
}

/// A string field of `v`, or empty.
fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Adds a rule's `at_least` pairs to `keys`, by level.
fn add_levels(keys: &mut [i64], pairs: &Value) {
    for pair in pairs.as_array().into_iter().flatten() {
        let (Some(level), Some(n)) = (
            pair.get(0).and_then(Value::as_u64),
            pair.get(1).and_then(Value::as_i64),
        ) else {
            continue;
        };
        if let Some(k) = levels::index(level)
            .checked_sub(1)
            .and_then(|i| keys.get_mut(i))
        {
            *k += n;
        }
    }
}

/// The `/api/usage` answers of every instance sharing a store, as one
/// answer of the same shape: per domain and rule, the summed distribution,
/// its quantiles and what the rule's limit refused.
pub fn merge(docs: &[Value]) -> Value {
    let mut all: BTreeMap<String, BTreeMap<String, Summed>> = BTreeMap::new();
    for doc in docs {
        for d in domains(doc) {
            let name = text(&d, "domain");
            let rules = all.entry(name).or_default();
            for r in d
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let label = text(r, "rule");
                let sum = rules.entry(label).or_insert_with(|| Summed {
                    first: r.clone(),
                    keys: vec![0; levels::len()],
                    hits: 0,
                });
                if let Some(pairs) = r.get("at_least") {
                    add_levels(&mut sum.keys, pairs);
                }
                sum.hits += r.get("hits").and_then(Value::as_u64).unwrap_or(0);
            }
        }
    }
    let domains: Vec<Value> = all
        .into_iter()
        .map(|(name, rules)| {
            let rules: Vec<Value> = rules.into_values().map(rule).collect();
            json!({"domain": name, "rules": rules, "instances": docs.len()})
        })
        .collect();
    json!({"domains": domains})
}

/// A rule's answer from its sums.
fn rule(sum: Summed) -> Value {
    let mut out = sum.first;
    let limit = out.get("limit").and_then(Value::as_u64).unwrap_or(0);
    if let Some(o) = out.as_object_mut() {
        o.insert("hits".into(), sum.hits.into());
        o.insert("usage".into(), summary(&sum.keys));
        o.insert("refused_by_limit".into(), refused_by(&sum.keys, limit));
        o.insert("at_least".into(), distribution(&sum.keys).into());
    }
    out
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
