//! The compiled, immutable rules of one load, and the reference's matching:
//! exact `key_value`, then the first matching wildcard in declaration order,
//! then the key-only default; a limit applies only where the request's
//! descriptor ends.

use std::sync::Arc;

use envoy_types::pb::google::protobuf::Struct;

use super::model::LimitDef;
use crate::rule_stats::RuleStats;
use crate::store::FailurePolicy;

/// A limit a request can hit, with everything a decision and its metrics need.
#[derive(Debug)]
pub struct Rule {
    pub domain: Arc<str>,
    /// The reference's stats key without the domain, e.g. `key1_value1.subkey1`.
    pub path: Arc<str>,
    /// The path this limit is shown and counted under: `path`, or for one
    /// limit of a `rate_limits` list `path:name` (or `path:index`).
    pub label: Arc<str>,
    pub limit: LimitDef,
    pub name: Option<Box<str>>,
    pub replaces: Box<[Box<str>]>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    /// Boxed: few rules carry metadata, and a million would each carry
    /// an empty map's room.
    pub metadata: Option<Box<Struct>>,
    pub stats: Arc<RuleStats>,
    /// This rule's `on_store_failure`.
    pub on_failure: Option<FailurePolicy>,
    /// `refundable`: its counters may be given back, so never cached.
    pub refundable: bool,
    /// `leased_allowance`: hot counters may be answered from leased allowance.
    pub leased_allowance: bool,
    /// `count_after` (or `--count-after`): its counters are answered from
    /// an instance's credit and counted in the store after.
    pub count_after: bool,
    /// The other limits of a `rate_limits` list, counted with this one.
    pub also: Box<[Arc<Rule>]>,
}

/// A `*` pattern over the composite `key_value`: each `*` matches any run of
/// characters, and the literal parts must appear in order.
#[derive(Debug)]
pub(super) struct Pattern {
    parts: Box<[Box<str>]>,
    /// The descriptor key as written, for quota-mode ambiguity checks.
    pub(super) key: Box<str>,
}

impl Pattern {
    fn new(composite: &str, key: &str) -> Pattern {
        Pattern {
            parts: composite.split('*').map(Box::from).collect(),
            key: Box::from(key),
        }
    }

    /// The pattern as written (`key_prefix*`).
    pub(super) fn text(&self) -> String {
        self.parts.join("*")
    }

    pub(super) fn matches(&self, s: &str) -> bool {
        let (Some(first), Some(last)) = (self.parts.first(), self.parts.last()) else {
            return false;
        };
        let Some(mut rest) = s.strip_prefix(&**first) else {
            return false;
        };
        let middle = self
            .parts
            .get(1..self.parts.len().saturating_sub(1))
            .unwrap_or_default();
        for part in middle {
            match rest.find(&**part).and_then(|i| rest.get(i + part.len()..)) {
                Some(after) => rest = after,
                None => return false,
            }
        }
        self.parts.len() > 1 && rest.ends_with(&**last)
    }
}

/// One node of the tree. Its key and value are the keys of the maps that
/// hold it, never copied here: a million per-customer nodes are the bulk of
/// a big snapshot, and each copy cost a pointer, a length and an
/// allocation per node.
#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) rule: Option<Arc<Rule>>,
    /// Boxed: most nodes are leaves, and a million leaves would carry an
    /// empty level each.
    pub(super) children: Option<Box<Level>>,
    /// The configured value, used in place of the runtime value in the counter
    /// key when `share_threshold` is set.
    pub(super) shared_value: Option<Box<str>>,
    pub(super) value_to_metric: bool,
}

/// How a level matched an entry, which names the node's own element of
/// the stats path: `key_value` for an exact value, the pattern for a
/// wildcard, `key` for the key-only default.
#[derive(Debug, Clone, Copy)]
pub(super) enum Via<'a> {
    Exact,
    Wildcard(&'a Pattern),
    KeyOnly,
}

impl Via<'_> {
    /// The node's element of the stats path, for the entry `key`=`value`
    /// it matched.
    fn element(self, key: &str, value: &str) -> String {
        match self {
            Via::Exact => format!("{key}_{value}"),
            Via::Wildcard(p) => p.text(),
            Via::KeyOnly => key.to_owned(),
        }
    }
}

/// The tables requests look up by their own strings. Built from config and
/// never grown by a request, so a fast hash under a per-process random seed
/// is enough (no one can insert colliding keys); SipHash cost a request
/// more than its whole matching.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
pub(super) struct KeyNodes {
    pub(super) default: Option<Node>,
    pub(super) values: FastMap<Box<str>, Node>,
}

#[derive(Debug, Default)]
pub(super) struct Level {
    pub(super) keys: FastMap<Box<str>, KeyNodes>,
    pub(super) wildcards: Vec<(Pattern, Node)>,
}

impl Level {
    /// Every node of the level with the key it matches and its exact
    /// value (`None` for a key-only default or a wildcard), in no
    /// particular order.
    pub(super) fn nodes(&self) -> impl Iterator<Item = (&str, Option<&str>, &Node)> {
        self.keys
            .iter()
            .flat_map(|(key, k)| {
                let values = k.values.iter().map(|(v, n)| (&**key, Some(&**v), n));
                k.default.iter().map(|n| (&**key, None, n)).chain(values)
            })
            .chain(self.wildcards.iter().map(|(p, n)| (&*p.key, None, n)))
    }

    pub(super) fn find(&self, key: &str, value: &str) -> Option<&Node> {
        self.find_via(key, value).map(|(node, _)| node)
    }

    /// The node an entry matches, and how.
    pub(super) fn find_via(&self, key: &str, value: &str) -> Option<(&Node, Via<'_>)> {
        let by_key = self.keys.get(key);
        if let Some(node) = by_key.and_then(|k| k.values.get(value)) {
            return Some((node, Via::Exact));
        }
        if !self.wildcards.is_empty() {
            let composite = format!("{key}_{value}");
            if let Some((p, node)) = self.wildcards.iter().find(|(p, _)| p.matches(&composite)) {
                return Some((node, Via::Wildcard(p)));
            }
        }
        by_key
            .and_then(|k| k.default.as_ref())
            .map(|node| (node, Via::KeyOnly))
    }
}

/// One domain's tree.
#[derive(Debug)]
pub struct Domain {
    pub(super) root: Level,
    rules: Vec<Arc<Rule>>,
    /// Counters for Envoy's per-request limit overrides, which match no rule;
    /// labelled `_override` rather than by their runtime values.
    pub override_stats: Arc<RuleStats>,
    /// Some node uses `share_threshold`, `value_to_metric` or `detailed_metric`.
    needs_path: bool,
}

/// What a request descriptor matched.
#[derive(Debug)]
pub struct Match<'a> {
    pub rule: &'a Arc<Rule>,
    /// Entries whose counter key uses the configured pattern instead of the
    /// runtime value (`share_threshold`), by entry index.
    pub shared: Vec<(usize, &'a str)>,
    /// The stats path when it depends on runtime values (`detailed_metric`,
    /// `value_to_metric`); `None` means the rule's own path.
    pub metric_path: Option<String>,
}

impl Domain {
    /// Finds the limit for one descriptor's entries, or `None` for no limit.
    pub fn find<'a, S: AsRef<str>>(&'a self, entries: &[(S, S)]) -> Option<Match<'a>> {
        let mut level = &self.root;
        // Only domains that share counters or put runtime values in metrics
        // need the path walked; the others match without allocating.
        let mut walked: Vec<(&Node, Via<'_>)> = Vec::new();
        let last = entries.len().checked_sub(1)?;
        for (i, (k, v)) in entries.iter().enumerate() {
            let (node, via) = level.find_via(k.as_ref(), v.as_ref())?;
            if self.needs_path {
                walked.push((node, via));
            }
            if i == last {
                let rule = node.rule.as_ref()?;
                return Some(Match {
                    rule,
                    shared: shared(&walked),
                    metric_path: metric_path(rule, &walked, entries),
                });
            }
            level = node.children.as_deref()?;
        }
        None
    }

    /// Every rule of the domain, in declaration order.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }
}

fn shared<'a>(walked: &[(&'a Node, Via<'_>)]) -> Vec<(usize, &'a str)> {
    walked
        .iter()
        .enumerate()
        .filter_map(|(i, (n, _))| n.shared_value.as_deref().map(|v| (i, v)))
        .collect()
}

fn metric_path<S: AsRef<str>>(
    rule: &Rule,
    walked: &[(&Node, Via<'_>)],
    entries: &[(S, S)],
) -> Option<String> {
    // A level that shares its counter (`share_threshold`) is named by its
    // pattern, never by the runtime value, even under `detailed_metric`:
    // the reference's stats name it so, and the values would be unbounded.
    let dynamic =
        |n: &Node| n.shared_value.is_none() && (rule.detailed_metric || n.value_to_metric);
    if !walked.iter().any(|(n, _)| dynamic(n)) {
        return None;
    }
    let parts: Vec<String> = walked
        .iter()
        .zip(entries)
        .map(
            |((n, via), (k, v))| match (dynamic(n), v.as_ref().is_empty()) {
                (true, false) => format!("{}_{}", k.as_ref(), v.as_ref()),
                (true, true) => k.as_ref().to_owned(),
                (false, _) => via.element(k.as_ref(), v.as_ref()),
            },
        )
        .collect();
    Some(parts.join("."))
}

mod compile;
pub use compile::compile;

#[cfg(test)]
#[path = "matcher_tests.rs"]
mod tests;
