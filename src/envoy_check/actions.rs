//! A `rate_limits` entry as Envoy 1.40 turns it into a descriptor: each
//! action's key, where its value comes from, and what happens when the
//! input is absent (Envoy drops the whole descriptor when an action cannot
//! append its entry, unless the action says `skip_if_absent`); and the
//! entry's `hits_addend`. An action or field this does not know is
//! reported as not understood, never guessed at.

use serde_json::Value;

/// Where an entry's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Written in the config.
    Fixed(String),
    /// Read at request time; the text says from what.
    Runtime(String),
}

/// What an absent input does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Absent {
    /// The input is always there.
    Never,
    /// The entry is left out; the descriptor is still sent.
    Skipped(String),
    /// No descriptor is sent for the request: it is not limited by this one.
    Dropped(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) value: Source,
    pub(crate) absent: Absent,
}

/// `hits_addend`: what the descriptor adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hits {
    One,
    Number(u64),
    /// A format; the request header or query parameter it reads, if any.
    Format {
        text: String,
        client: Option<Input>,
    },
}

/// An input the client writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    Header(String),
    Query(String),
}

/// One `rate_limits` entry.
#[derive(Debug, Clone)]
pub(crate) struct Descriptor {
    pub(crate) entries: Vec<Entry>,
    pub(crate) hits: Hits,
    pub(crate) negative: bool,
    pub(crate) stream_done: bool,
    /// A `limit` override from metadata (the rule's limit may not apply).
    pub(crate) overridden: bool,
    pub(crate) not_understood: Vec<String>,
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn skip(v: &Value) -> bool {
    v.get("skip_if_absent")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn absent(v: &Value, what: String) -> Absent {
    if skip(v) {
        Absent::Skipped(what)
    } else {
        Absent::Dropped(what)
    }
}

/// The fields of `rate_limits[]` this check knows.
const ENTRY_FIELDS: [&str; 7] = [
    "actions",
    "stage",
    "disable_key",
    "limit",
    "hits_addend",
    "apply_on_stream_done",
    // Envoy 1.40: which rate-limit headers this entry's answer adds; it
    // changes no descriptor.
    "x_ratelimit_option",
];

/// Reads one `rate_limits` entry; `cluster` is the route's cluster (what
/// `destination_cluster` sends).
pub(crate) fn descriptor(v: &Value, cluster: Option<&str>) -> Descriptor {
    let mut d = Descriptor {
        entries: Vec::new(),
        hits: Hits::One,
        negative: false,
        stream_done: v
            .get("apply_on_stream_done")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        overridden: v.get("limit").is_some(),
        not_understood: Vec::new(),
    };
    for (k, _) in v.as_object().into_iter().flatten() {
        if !ENTRY_FIELDS.contains(&k.as_str()) {
            d.not_understood.push(format!("field {k}"));
        }
    }
    for a in v
        .get("actions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match action(a, cluster) {
            Ok(e) => d.entries.push(e),
            Err(what) => d.not_understood.push(what),
        }
    }
    if let Some(h) = v.get("hits_addend") {
        d.negative = h
            .get("is_negative_hits")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        d.hits = match (h.get("number"), s(h, "format")) {
            (Some(n), _) => {
                Hits::Number(n.as_u64().or_else(|| n.as_str()?.parse().ok()).unwrap_or(0))
            }
            (None, Some(f)) => Hits::Format {
                text: f.to_owned(),
                client: client_input(f),
            },
            (None, None) => Hits::One,
        };
    }
    d
}

/// The request header (`%REQ(h)%`) or query parameter (`%QUERY_PARAM(q)%`)
/// a format reads.
fn client_input(format: &str) -> Option<Input> {
    let inside = |tag: &str| {
        let at = format.find(tag)? + tag.len();
        let rest = format.get(at..)?;
        let end = rest.find(')')?;
        let name = rest.get(..end)?.split(['?', ':']).next()?;
        Some(name.trim().to_ascii_lowercase())
    };
    inside("%REQ(")
        .map(Input::Header)
        .or_else(|| inside("%QUERY_PARAM(").map(Input::Query))
}

/// One action: its entry, or what was not understood.
fn action(a: &Value, cluster: Option<&str>) -> Result<Entry, String> {
    let Some((kind, v)) = a.as_object().and_then(|o| o.iter().next()) else {
        return Err("an empty action".into());
    };
    let key = |default: &str| s(v, "descriptor_key").unwrap_or(default).to_owned();
    let runtime = |key: &str, from: &str| Entry {
        key: key.to_owned(),
        value: Source::Runtime(from.to_owned()),
        absent: Absent::Never,
    };
    Ok(match kind.as_str() {
        "generic_key" => Entry {
            key: key("generic_key"),
            value: Source::Fixed(s(v, "descriptor_value").unwrap_or_default().to_owned()),
            absent: Absent::Never,
        },
        "request_headers" | "query_parameters" | "metadata" | "dynamic_metadata" => input(kind, v),
        "remote_address" => runtime(
            "remote_address",
            "the client address (x-forwarded-for, trusted hops)",
        ),
        "masked_remote_address" => runtime("masked_remote_address", "the client address, masked"),
        "source_cluster" => runtime("source_cluster", "this Envoy's --service-cluster"),
        "destination_cluster" => match cluster {
            Some(c) => Entry {
                key: "destination_cluster".into(),
                value: Source::Fixed(c.to_owned()),
                absent: Absent::Never,
            },
            None => runtime("destination_cluster", "the route's cluster"),
        },
        // A fixed entry when a match holds; no descriptor otherwise.
        "remote_address_match" | "header_value_match" | "query_parameter_value_match" => {
            matched(kind, v)
        }
        other => return Err(format!("action {other}")),
    })
}

/// A match action's fixed entry, and when it is left out (Envoy 1.40's
/// remote_address_match: the client address in, or inverted out of, the
/// ranges; a header or query parameter value match: as `expect_match`).
fn matched(kind: &str, v: &Value) -> Entry {
    let (default, flag, inverted_when, when) = match kind {
        "remote_address_match" => (
            "remote_address_match",
            v.pointer("/address_matcher/invert_match"),
            "the client address is in the ranges",
            "the client address is outside the ranges",
        ),
        "header_value_match" => (
            "header_match",
            inverted(v),
            "the match succeeds",
            "the match fails",
        ),
        _ => (
            "query_match",
            inverted(v),
            "the match succeeds",
            "the match fails",
        ),
    };
    let what = if flag.and_then(Value::as_bool).unwrap_or(false) {
        inverted_when
    } else {
        when
    };
    Entry {
        key: s(v, "descriptor_key").unwrap_or(default).to_owned(),
        value: Source::Fixed(s(v, "descriptor_value").unwrap_or_default().to_owned()),
        absent: Absent::Dropped(what.into()),
    }
}

/// `expect_match: false`, as an "inverted" flag (absent: expected).
fn inverted(v: &Value) -> Option<&Value> {
    match v.get("expect_match").and_then(Value::as_bool) {
        Some(false) => Some(&Value::Bool(true)),
        _ => None,
    }
}

/// An action whose value is read from the request (a header, a query
/// parameter, metadata), and what its absence does.
fn input(kind: &str, v: &Value) -> Entry {
    let (from, default) = match kind {
        "request_headers" => {
            let h = s(v, "header_name").unwrap_or_default().to_ascii_lowercase();
            (format!("request header {h}"), None)
        }
        "query_parameters" => {
            let q = s(v, "query_parameter_name").unwrap_or_default();
            (format!("query parameter {q}"), None)
        }
        _ => {
            let path = v
                .pointer("/metadata_key/key")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (format!("metadata {path}"), s(v, "default_value"))
        }
    };
    let what = format!("{} absent", from.trim_start_matches("request "));
    Entry {
        key: s(v, "descriptor_key").unwrap_or_default().to_owned(),
        value: Source::Runtime(from),
        absent: match default {
            Some(_) => Absent::Never,
            None => absent(v, what),
        },
    }
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
