//! Why a descriptor meets the rule it meets: the same walk as matching
//! ([`Domain::find`]), told level by level (exact value, wildcard, key
//! only, or the entry that found nothing), for an operator's lookup. Never
//! on the request path.

use std::sync::Arc;

use super::matcher::{Domain, Level, Node, Rule};

/// How one entry of a descriptor was matched at its level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// A rule for exactly this `key` and `value`.
    Exact,
    /// The first wildcard, in declaration order, over `key_value`.
    Wildcard(String),
    /// The key's default (a rule with the key and no value).
    KeyOnly,
    /// Nothing at this level: the descriptor has no limit.
    Nothing,
}

impl How {
    /// The word the lookup's JSON uses.
    pub fn name(&self) -> &'static str {
        match self {
            How::Exact => "exact",
            How::Wildcard(_) => "wildcard",
            How::KeyOnly => "key_only",
            How::Nothing => "no_rule",
        }
    }
}

/// One entry's step of the walk.
#[derive(Debug, Clone)]
pub struct Step {
    pub key: String,
    pub how: How,
}

/// The walk of one descriptor: a step per entry reached, and the rule where
/// it ended (`None`: no limit).
#[derive(Debug)]
pub struct Explanation<'a> {
    pub steps: Vec<Step>,
    pub rule: Option<&'a Arc<Rule>>,
    /// Why there is no rule, when there is none.
    pub why_none: Option<String>,
}

impl Level {
    fn find_how(&self, key: &str, value: &str) -> (Option<&Node>, How) {
        let by_key = self.keys.get(key);
        if let Some(node) = by_key.and_then(|k| k.values.get(value)) {
            return (Some(node), How::Exact);
        }
        let composite = format!("{key}_{value}");
        if let Some((p, node)) = self.wildcards.iter().find(|(p, _)| p.matches(&composite)) {
            return (Some(node), How::Wildcard(p.text()));
        }
        match by_key.and_then(|k| k.default.as_ref()) {
            Some(node) => (Some(node), How::KeyOnly),
            None => (None, How::Nothing),
        }
    }
}

impl Domain {
    /// Walks `entries` as [`Domain::find`] does, saying how each matched.
    pub fn explain<'a, S: AsRef<str>>(&'a self, entries: &[(S, S)]) -> Explanation<'a> {
        let mut steps = Vec::new();
        let mut level = Some(&self.root);
        for (i, (k, v)) in entries.iter().enumerate() {
            let key = k.as_ref().to_owned();
            let Some(here) = level else {
                let why = format!("entry {} ({key}) is deeper than any rule", i + 1);
                return none(steps, why);
            };
            let (node, how) = here.find_how(k.as_ref(), v.as_ref());
            steps.push(Step { key, how });
            let Some(node) = node else {
                let why = format!("entry {} ({}) matches no rule", i + 1, k.as_ref());
                return none(steps, why);
            };
            if i + 1 == entries.len() {
                return match node.rule.as_ref() {
                    Some(rule) => Explanation {
                        steps,
                        rule: Some(rule),
                        why_none: None,
                    },
                    None => none(steps, "no limit is set where the descriptor ends".into()),
                };
            }
            level = node.children.as_ref();
        }
        none(steps, "no entries".into())
    }
}

fn none(steps: Vec<Step>, why: String) -> Explanation<'static> {
    Explanation {
        steps,
        rule: None,
        why_none: Some(why),
    }
}
