//! The typed model of one config file, in the envoyproxy/ratelimit format, and
//! its validation. Parsing goes through the positioned tree of [`super::yaml`]
//! so every error can say where it is.

use std::path::Path;

use crate::config::yaml::Location;
use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};

use super::error::ConfigError;

pub(crate) mod after;
mod documents;
mod keys;
mod limits;
mod metadata;
mod shape;
mod split;
use super::yaml::{self, Node, Value, position};
use crate::limiter::{Algorithm, Period};
use crate::store::FailurePolicy;
pub use documents::{parse_documents, parse_file};
pub use keys::VALID_KEYS;
use metadata::to_pb;
pub(crate) use shape::{check_shape, shaped};

/// Descriptor definitions, each boxed: a million of them in one list would
/// be a third of a gigabyte of one block (copied whole when a big file's
/// parts are joined, and held until the last is compiled), where boxes are
/// freed one by one as they are compiled: a million-rule check peaked at
/// 1.22 GB unboxed, 0.90 GB boxed.
#[allow(clippy::vec_box)]
pub type Defs = Vec<Box<DescriptorDef>>;

/// One file: a domain and its descriptor tree.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainFile {
    pub domain: String,
    pub descriptors: Defs,
}

/// Where a definition was written, for later (cross-file) errors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    pub file: std::path::PathBuf,
    pub position: Option<(u64, u64)>,
    pub field: String,
}

/// One node of the descriptor tree as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescriptorDef {
    pub key: String,
    pub value: Option<String>,
    pub rate_limit: Option<RateLimitDef>,
    /// `rate_limits:`: several limits on one descriptor, every one counted.
    pub rate_limits: Vec<RateLimitDef>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    pub metadata: Option<Struct>,
    pub descriptors: Defs,
    pub origin: Origin,
}

impl DescriptorDef {
    /// Whether the descriptor is a pattern (`*` in its key or value), which
    /// the matcher tries after the exact values.
    pub fn is_pattern(&self) -> bool {
        self.key.contains('*') || self.value.as_ref().is_some_and(|v| v.contains('*'))
    }

    /// The reference's node identity: `key_value`, or `key` without a value.
    pub fn composite(&self) -> String {
        match &self.value {
            Some(v) => format!("{}_{}", self.key, v),
            None => self.key.clone(),
        }
    }
}

/// What a rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitDef {
    Unlimited,
    Limited {
        requests_per_unit: u32,
        /// `unit:`, or `window:` for any other length.
        period: Period,
        algorithm: Algorithm,
    },
}

/// A `rate_limit` block.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitDef {
    pub limit: LimitDef,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// `on_store_failure`: this rule's failure policy over `--store-failure`.
    pub on_failure: Option<FailurePolicy>,
    /// `refundable`: its counters may be given back (`is_negative_hits`),
    /// so no instance answers them from its over-limit cache.
    pub refundable: bool,
    /// `leased_allowance: false`: every request on the rule's counters
    /// asks the store, never a lease (on by default).
    pub leased_allowance: bool,
    /// `count_after` as written (unset: `--count-after`, at compile).
    pub count_after: Option<bool>,
}

struct Parser<'a> {
    file: &'a Path,
    errors: Vec<ConfigError>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Parser<'_> {
    fn error(&mut self, loc: &Location, field: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            position: position(loc),
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// The reference's first pass: string keys from the allow-list, lists of
    /// maps, and no scalar other than string, integer, boolean or null.
    fn check_generic(&mut self, node: &Node, path: &str, in_metadata: bool) {
        match &node.value {
            Value::Map(entries) => {
                for (k, v) in entries {
                    let Value::Str(key) = &k.value else {
                        if !in_metadata {
                            let msg =
                                format!("config error, key is not of type string: {}", k.value);
                            self.error(&k.referenced, path, msg);
                        }
                        continue;
                    };
                    let field = join(path, key);
                    if !in_metadata && !VALID_KEYS.contains(&key.as_str()) {
                        let msg = format!("config error, unknown key '{key}'");
                        self.error(&k.referenced, &field, msg);
                        continue;
                    }
                    self.check_generic(v, &field, in_metadata || key == "metadata");
                }
            }
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    let field = format!("{path}[{i}]");
                    if !in_metadata && !matches!(item.value, Value::Map(_)) {
                        let msg = format!(
                            "config error, yaml file contains list of type other than map: {}",
                            item.value
                        );
                        self.error(&item.referenced, &field, msg);
                        continue;
                    }
                    self.check_generic(item, &field, in_metadata);
                }
            }
            Value::Float(x) if !in_metadata => {
                let msg = format!(
                    "error checking config: {x} is a float; only strings, integers, booleans and null are accepted"
                );
                self.error(&node.referenced, path, msg);
            }
            _ => {}
        }
    }

    fn domain_file(&mut self, root: &Node) -> DomainFile {
        let mut out = DomainFile {
            domain: String::new(),
            descriptors: Vec::new(),
        };
        let entries = match &root.value {
            Value::Map(entries) => entries.as_slice(),
            Value::Null => &[],
            other => {
                let msg = format!(
                    "error loading config file: the document is a {}, not a map with domain and descriptors",
                    other.kind()
                );
                self.error(&root.referenced, "", msg);
                return out;
            }
        };
        for (k, v) in entries {
            match key_of(k) {
                "domain" => out.domain = self.string(v, "domain").unwrap_or_default(),
                "descriptors" => out.descriptors = self.descriptors(v, "descriptors"),
                // The config's name in the xDS protocol, which Envoy Gateway
                // writes into its files too; the reference ignores it.
                "name" => {
                    self.string(v, "name");
                }
                other => self.misplaced(k, other, "the top level"),
            }
        }
        if out.domain.is_empty() {
            self.error(
                &root.referenced,
                "domain",
                "config file cannot have empty domain",
            );
        }
        out
    }

    fn misplaced(&mut self, k: &Node, key: &str, level: &str) {
        let msg = format!(
            "config error, unknown key '{key}' at {level} (it belongs elsewhere in the tree)"
        );
        self.error(&k.referenced, key, msg);
    }

    fn descriptors(&mut self, node: &Node, path: &str) -> Defs {
        match &node.value {
            Value::Null => Vec::new(),
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| Box::new(self.descriptor(item, &format!("{path}[{i}]"))))
                .collect(),
            other => {
                let msg = format!(
                    "error loading config file: descriptors must be a list, not a {}",
                    other.kind()
                );
                self.error(&node.referenced, path, msg);
                Vec::new()
            }
        }
    }

    fn descriptor(&mut self, node: &Node, path: &str) -> DescriptorDef {
        let mut d = DescriptorDef {
            origin: Origin {
                file: self.file.to_path_buf(),
                position: position(&node.referenced),
                field: path.to_owned(),
            },
            ..DescriptorDef::default()
        };
        let Value::Map(entries) = &node.value else {
            return d;
        };
        let mut rate_limit = None;
        let mut rate_limits = None;
        for (k, v) in entries {
            let key = key_of(k);
            let field = join(path, key);
            match key {
                "key" => d.key = self.string(v, &field).unwrap_or_default(),
                // An empty value is no value, as the reference reads it:
                // any value of the key (its "distinct" limits).
                "value" => d.value = self.string(v, &field).filter(|v| !v.is_empty()),
                // `rate_limit: null` (or `rate_limits: null`) sets no limit.
                "rate_limit" if v.value != Value::Null => rate_limit = Some((v, field)),
                "rate_limits" if v.value != Value::Null => rate_limits = Some((v, field)),
                "rate_limit" | "rate_limits" => {}
                "shadow_mode" => d.shadow_mode = self.boolean(v, &field),
                "quota_mode" => d.quota_mode = self.boolean(v, &field),
                "detailed_metric" => d.detailed_metric = self.boolean(v, &field),
                "value_to_metric" => d.value_to_metric = self.boolean(v, &field),
                "share_threshold" => d.share_threshold = self.boolean(v, &field),
                "metadata" => d.metadata = self.metadata(v, &field),
                "descriptors" => d.descriptors = self.descriptors(v, &field),
                other => self.misplaced(k, other, "a descriptor"),
            }
        }
        if d.key.is_empty() {
            self.error(
                &node.referenced,
                &join(path, "key"),
                "descriptor has empty key",
            );
        }
        match (rate_limit, rate_limits) {
            (Some(_), Some((v, field))) => self.error(
                &v.referenced,
                &field,
                "a descriptor has either rate_limit or rate_limits, not both",
            ),
            (Some((v, field)), None) => d.rate_limit = self.rate_limit(v, &field),
            (None, Some((v, field))) => d.rate_limits = self.rate_limits(v, &field),
            (None, None) => {}
        }
        self.check_share_threshold(node, path, &d);
        d
    }

    fn check_share_threshold(&mut self, node: &Node, path: &str, d: &DescriptorDef) {
        if d.share_threshold && !d.composite().contains('*') {
            let msg = format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{}'",
                d.composite()
            );
            self.error(&node.referenced, &join(path, "share_threshold"), msg);
        }
    }

    fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match &node.value {
            Value::Null => None,
            Value::Str(s) => Some(s.clone()),
            // YAML scalars such as `value: 123` or `value: true` are strings to the reference.
            Value::Int(_) | Value::Bool(_) => Some(node.value.to_string()),
            other => {
                let msg = format!(
                    "error loading config file: expected a string, found a {}",
                    other.kind()
                );
                self.error(&node.referenced, field, msg);
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, field: &str) -> bool {
        match &node.value {
            Value::Bool(b) => *b,
            Value::Null => false,
            other => {
                let msg = format!(
                    "error loading config file: expected true or false, found {} '{other}'",
                    other.kind()
                );
                self.error(&node.referenced, field, msg);
                false
            }
        }
    }

    fn uint32(&mut self, node: &Node, field: &str) -> u32 {
        match &node.value {
            Value::Int(i) => match u32::try_from(*i) {
                Ok(n) => n,
                Err(_) => {
                    let msg =
                        format!("error loading config file: {i} is not an unsigned 32-bit integer");
                    self.error(&node.referenced, field, msg);
                    0
                }
            },
            Value::Null => 0,
            other => {
                let msg = format!(
                    "error loading config file: expected an unsigned integer, found {} '{other}'",
                    other.kind()
                );
                self.error(&node.referenced, field, msg);
                0
            }
        }
    }

    fn metadata(&mut self, node: &Node, field: &str) -> Option<Struct> {
        match to_pb(node) {
            Ok(PbValue {
                kind: Some(Kind::StructValue(s)),
            }) => Some(s),
            Ok(PbValue {
                kind: Some(Kind::NullValue(_)),
            }) => None,
            Ok(_) => {
                self.error(
                    &node.referenced,
                    field,
                    "error parsing metadata: metadata must be a map",
                );
                None
            }
            Err((loc, msg)) => {
                self.error(&loc, field, format!("error parsing metadata: {msg}"));
                None
            }
        }
    }
}

fn key_of(k: &Node) -> &str {
    match &k.value {
        Value::Str(s) => s,
        _ => "",
    }
}
