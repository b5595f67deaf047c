//! Why a descriptor meets the rule it meets: the same walk as matching
//! ([`Domain::find`]), told level by level (exact value, wildcard, key
//! only, or the entry that found nothing), for an operator's lookup. Never
//! on the request path.

use std::sync::Arc;

use super::matcher::{Domain, Level, Node, Rule, Via};

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
        match self.find_via(key, value) {
            Some((node, Via::Exact)) => (Some(node), How::Exact),
            Some((node, Via::Wildcard(p))) => (Some(node), How::Wildcard(p.text())),
            Some((node, Via::KeyOnly)) => (Some(node), How::KeyOnly),
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
            level = node.children.as_deref();
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

/// A descriptor's entry as Envoy will send it: a value fixed in the config,
/// or one read at request time (a header, an address), unknown here.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'s> {
    Fixed(&'s str),
    Runtime,
}

/// Where a descriptor of fixed keys can go in a domain's rules.
#[derive(Debug, Default)]
pub struct Reach<'a> {
    /// The rule any value meets (for a fixed value, the rule it meets),
    /// or `None`: unlimited.
    pub general: Option<&'a Arc<Rule>>,
    /// Rules only some runtime values meet (`key=value` or a wildcard, and
    /// the rule), besides the general one.
    pub specific: Vec<(String, &'a Arc<Rule>)>,
    /// Why the general case meets no rule.
    pub why_none: Option<String>,
}

impl Domain {
    /// Where a descriptor of `entries` (keys, and values fixed or read at
    /// request time) can meet a rule: the general case and the values with
    /// rules of their own.
    pub fn reach<'a>(&'a self, entries: &[(&str, Shape<'_>)]) -> Reach<'a> {
        let mut out = Reach::default();
        walk(Some(&self.root), entries, 0, true, String::new(), &mut out);
        out
    }
}

/// Walks `level` with entry `i` on; `general` is false once a specific
/// runtime value was taken (`via` names it).
fn walk<'a>(
    level: Option<&'a Level>,
    entries: &[(&str, Shape<'_>)],
    i: usize,
    general: bool,
    via: String,
    out: &mut Reach<'a>,
) {
    let Some((key, shape)) = entries.get(i) else {
        return;
    };
    let Some(level) = level else {
        if general {
            out.why_none = Some(format!("entry {} ({key}) is deeper than any rule", i + 1));
        }
        return;
    };
    let last = i + 1 == entries.len();
    let step = |node: &'a Node, general: bool, via: String, out: &mut Reach<'a>| {
        if !last {
            return walk(node.children.as_deref(), entries, i + 1, general, via, out);
        }
        match (&node.rule, general) {
            (Some(rule), true) => out.general = Some(rule),
            (Some(rule), false) => out.specific.push((via, rule)),
            (None, true) => out.why_none = Some("no limit is set where the descriptor ends".into()),
            (None, false) => {}
        }
    };
    match shape {
        Shape::Fixed(value) => match level.find_how(key, value) {
            (Some(node), _) => step(node, general, via, out),
            (None, _) if general => {
                out.why_none = Some(format!("entry {} ({key}={value}) matches no rule", i + 1));
            }
            (None, _) => {}
        },
        Shape::Runtime => runtime(level, key, i, general, via, out, &step),
    }
}

/// A value read at request time at `level`: every value with a rule of its
/// own (and every wildcard of the key) is a specific case; the key's
/// default is the general one.
fn runtime<'a>(
    level: &'a Level,
    key: &str,
    i: usize,
    general: bool,
    via: String,
    out: &mut Reach<'a>,
    step: &dyn Fn(&'a Node, bool, String, &mut Reach<'a>),
) {
    let by_key = level.keys.get(key);
    for (value, node) in by_key.into_iter().flat_map(|k| k.values.iter()) {
        step(node, false, format!("{key}={value}"), out);
    }
    let prefix = format!("{key}_");
    let mut wildcards = false;
    for (pattern, node) in &level.wildcards {
        if pattern.text().starts_with(&prefix) {
            wildcards = true;
            step(
                node,
                false,
                format!("{key} wildcard {}", pattern.text()),
                out,
            );
        }
    }
    let some_values = wildcards || by_key.is_some_and(|k| !k.values.is_empty());
    match by_key.and_then(|k| k.default.as_ref()) {
        Some(node) => step(node, general, via, out),
        None if general && !some_values => {
            out.why_none = Some(format!("entry {} ({key}) matches no rule", i + 1));
        }
        None if general => {
            out.why_none = Some(format!(
                "entry {} ({key}) has rules for some values only, none for any value",
                i + 1
            ));
        }
        None => {}
    }
}
