//! An overlay's `rate_limit` block over a rule a control plane pushed: the
//! overlay gives sluice's shape fields (`window`, `algorithm`, `burst`,
//! `overdraft`, `on_store_failure`, `refundable`, `leased_allowance`,
//! `count_after`), the control plane keeps the reference's (`unit`,
//! `requests_per_unit`, `unlimited`, `name`, `replaces`). The two are read as one block by the
//! rule file's own parser, so a shape means what it means in a file.

use std::path::Path;

use crate::config::yaml::Location;

use super::super::yaml::{Node, Value};
use super::{ConfigError, LimitDef, Parser, RateLimitDef, key_of};
use crate::limiter::{Period, Unit};

/// Fields that belong to the control plane: an overlay that sets one is
/// refused, so a pushed limit never changes its number without a push.
const PUSHED: [&str; 5] = ["unit", "requests_per_unit", "unlimited", "name", "replaces"];

/// Refuses what an overlay block may not hold, then reads it over a
/// stand-in limit so every error it will ever give is found at load time.
pub(crate) fn check_shape(file: &Path, node: &Node, path: &str) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut err = |loc: &Location, field: String, message: String| {
        errors.push(ConfigError {
            file: file.to_path_buf(),
            position: super::position(loc),
            field,
            message,
        });
    };
    let Value::Map(entries) = &node.value else {
        let msg = format!("rate_limit must be a map, not a {}", node.value.kind());
        err(&node.referenced, path.to_owned(), msg);
        return errors;
    };
    for (k, v) in entries {
        let key = key_of(k);
        let field = super::join(path, key);
        if PUSHED.contains(&key) {
            let msg = format!(
                "{key} comes from the control plane; an overlay gives the shape only (window, algorithm, burst, overdraft, on_store_failure, refundable, leased_allowance, count_after)"
            );
            err(&k.referenced, field, msg);
        } else if key == "algorithm" && matches!(&v.value, Value::Str(a) if a == "concurrency") {
            let msg = "algorithm: concurrency counts slots, not requests per unit: write it in a rule file, not over a pushed rate".to_owned();
            err(&v.referenced, field, msg);
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    let stand_in = RateLimitDef {
        limit: LimitDef::Limited {
            requests_per_unit: 1,
            period: Period::Unit(Unit::Minute),
            algorithm: crate::limiter::Algorithm::FixedWindow,
        },
        name: None,
        replaces: Vec::new(),
        on_failure: None,
        refundable: false,
        leased_allowance: true,
        count_after: None,
    };
    shaped(file, node, path, &stand_in)
        .err()
        .unwrap_or_default()
}

/// The pushed limit with the overlay's shape: its `requests_per_unit` per
/// its unit, or per the overlay's `window`, counted as the overlay says.
/// An unlimited rule stays unlimited.
pub(crate) fn shaped(
    file: &Path,
    node: &Node,
    path: &str,
    pushed: &RateLimitDef,
) -> Result<RateLimitDef, Vec<ConfigError>> {
    let LimitDef::Limited {
        requests_per_unit,
        period,
        ..
    } = pushed.limit
    else {
        return Ok(pushed.clone());
    };
    let Value::Map(entries) = &node.value else {
        return Ok(pushed.clone());
    };
    let mut entries = entries.clone();
    let windowed = entries.iter().any(|(k, _)| key_of(k) == "window");
    let synthetic = |key: &str, value: Value| {
        (
            Node::new(
                Value::Str(key.to_owned()),
                Location::UNKNOWN,
                Location::UNKNOWN,
            ),
            Node::new(value, Location::UNKNOWN, Location::UNKNOWN),
        )
    };
    entries.push(synthetic(
        "requests_per_unit",
        Value::Int(requests_per_unit.into()),
    ));
    if !windowed {
        let unit = match period {
            Period::Unit(u) => u.name().to_owned(),
            Period::CalendarMonth => Unit::Month.name().to_owned(),
            Period::Seconds(n) => return Err(vec![seconds_pushed(file, path, n)]),
        };
        entries.push(synthetic("unit", Value::Str(unit)));
    }
    let block = Node::new(Value::Map(entries), node.referenced, node.defined);
    let mut p = Parser {
        file,
        errors: Vec::new(),
    };
    let def = p.rate_limit(&block, path);
    match def {
        Some(def) if p.errors.is_empty() => Ok(RateLimitDef {
            name: pushed.name.clone(),
            replaces: pushed.replaces.clone(),
            ..def
        }),
        _ => Err(p.errors),
    }
}

/// A pushed limit always has a unit; this is for a misuse of [`shaped`].
fn seconds_pushed(file: &Path, path: &str, n: u32) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        position: None,
        field: path.to_owned(),
        message: format!("the limit under this shape has a window of {n}s, not a unit"),
    }
}
