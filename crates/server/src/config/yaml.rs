//! A generic YAML tree that keeps the position of every node.
//!
//! The reference validates a config in two passes: a generic pass over the raw
//! document (string keys, known keys, no floats) and a typed pass. Parsing into
//! this tree first lets sluice do the same while still knowing the line and
//! column of each field for its error messages.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

mod events;

/// Where a node was written: 1-based line and column, 0 when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Location {
    line: u32,
    column: u32,
}

impl Location {
    pub const UNKNOWN: Location = Location { line: 0, column: 0 };

    fn at(line: usize, column: usize) -> Location {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Location {
            line: clamp(line),
            column: clamp(column),
        }
    }

    pub fn line(&self) -> u64 {
        self.line.into()
    }

    pub fn column(&self) -> u64 {
        self.column.into()
    }
}

impl From<serde_saphyr::Location> for Location {
    fn from(l: serde_saphyr::Location) -> Location {
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Location {
            line: clamp(l.line()),
            column: clamp(l.column()),
        }
    }
}

/// One YAML node with the place it was written: where it is used
/// (`referenced`) and, for an alias, where its anchor defined it.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub referenced: Location,
    pub defined: Location,
}

impl Node {
    pub fn new(value: Value, referenced: Location, defined: Location) -> Node {
        Node {
            value,
            referenced,
            defined,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Spanned::<Value>::deserialize(d)?;
        Ok(Node::new(s.value, s.referenced.into(), s.defined.into()))
    }
}

/// A YAML value as the document wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// The name of the value's type, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Seq(_) => "list",
            Value::Map(_) => "map",
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str(""),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
            Value::Seq(_) => f.write_str("[...]"),
            Value::Map(_) => f.write_str("{...}"),
        }
    }
}

/// Line and column of a node, when the parser knew them.
pub fn position(loc: &Location) -> Option<(u64, u64)> {
    (loc.line() > 0).then(|| (loc.line(), loc.column()))
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(i128::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<Node, Node>()? {
            entries.push(entry);
        }
        Ok(Value::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

/// A YAML syntax error with its position.
#[derive(Debug)]
pub struct SyntaxError {
    pub message: String,
    pub position: Option<(u64, u64)>,
}

/// YAML nesting allowed in a rule file: 16 levels of descriptors (each a
/// sequence and a map) and then some. Deserializing recurses once per level,
/// so this bound keeps a hostile file from overflowing a thread's stack,
/// including the 2 MiB of the threads that reload.
pub const MAX_DEPTH: usize = 40;

fn null() -> Node {
    Node::new(Value::Null, Location::UNKNOWN, Location::UNKNOWN)
}

/// Bounds on one rule file (`--max-rule-file-bytes`,
/// `--max-rule-file-nodes`): a file past one is refused with the flag to
/// raise, never half read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBounds {
    pub max_bytes: usize,
    /// YAML nodes (maps, lists and scalars): a rule is about 10.
    pub max_nodes: usize,
}

impl Default for FileBounds {
    /// 256 MiB and 12 million nodes: a million per-customer rules in one
    /// file, a little over 100 MiB of YAML.
    fn default() -> Self {
        FileBounds {
            max_bytes: 256 << 20,
            max_nodes: 12_000_000,
        }
    }
}

fn options(bounds: FileBounds) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_nodes = bounds.max_nodes;
    // Every node is one event, a map or a list two: events follow nodes.
    budget.max_events = bounds.max_nodes.saturating_mul(2).saturating_add(64);
    budget.max_total_scalar_bytes = bounds.max_bytes;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

fn syntax(e: &serde_saphyr::Error, bounds: FileBounds) -> SyntaxError {
    use serde_saphyr::budget::BudgetBreach;
    let message = match e.without_snippet() {
        serde_saphyr::Error::Budget {
            breach: BudgetBreach::Nodes { nodes } | BudgetBreach::Events { events: nodes },
            ..
        } => format!(
            "the file holds more than {} YAML nodes (reached {nodes} here), the bound --max-rule-file-nodes sets; a rule is about 10 nodes: raise the flag to load it",
            bounds.max_nodes
        ),
        serde_saphyr::Error::Budget {
            breach: BudgetBreach::ScalarBytes { .. },
            ..
        } => too_big(bounds),
        _ => first_line(&e.to_string()),
    };
    SyntaxError {
        position: e.location().map(Location::from).as_ref().and_then(position),
        message,
    }
}

fn too_big(bounds: FileBounds) -> String {
    format!(
        "the file holds more than {} bytes, the bound --max-rule-file-bytes sets: raise the flag to load it",
        bounds.max_bytes
    )
}

/// Parses one document into a positioned tree. An empty document is `Null`.
#[cfg(test)]
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.trim().is_empty() {
        return Ok(null());
    }
    let bounds = FileBounds::default();
    serde_saphyr::from_str_with_options::<Node>(text, options(bounds))
        .map_err(|e| syntax(&e, bounds))
}

/// Parses every document of a text (`---` between them) into positioned
/// trees, empty ones left out; a text with none is one `Null` document.
pub fn parse_all(text: &str, bounds: FileBounds) -> Result<Vec<Node>, SyntaxError> {
    if text.len() > bounds.max_bytes {
        return Err(SyntaxError {
            message: format!("{} ({} bytes)", too_big(bounds), text.len()),
            position: None,
        });
    }
    if text.trim().is_empty() {
        return Ok(vec![null()]);
    }
    if let Some(doc) = events::read(text, bounds) {
        return Ok(vec![doc]);
    }
    let docs: Vec<Node> =
        serde_saphyr::from_str_multiple_with_options::<Node, Vec<Node>>(text, options(bounds))
            .map_err(|e| syntax(&e, bounds))?;
    Ok(if docs.is_empty() { vec![null()] } else { docs })
}

/// Whether the event reading, where it reads `text` at all, reads it as
/// serde's does: what the config fuzzer holds every input to.
pub fn readings_agree(text: &str) -> bool {
    let bounds = FileBounds::default();
    let Some(fast) = events::read(text, bounds) else {
        return true;
    };
    serde_saphyr::from_str_multiple_with_options::<Node, Vec<Node>>(text, options(bounds))
        .is_ok_and(|docs| docs == [fast])
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_owned()
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
