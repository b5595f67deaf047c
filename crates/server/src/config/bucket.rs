//! Quota buckets against a domain's rule tree.
//!
//! A bucket id from Envoy's `rate_limit_quota` filter is a map, with no
//! order, while a rule is a path. A bucket matches a rule when its entries,
//! taken one per tree level, walk from the root to a node with a limit and
//! every entry is used. Each level consumes an entry whose key it names, by the
//! descriptor precedence (exact value, then the first matching wildcard, then
//! the key-only default). Where two orders of the same entries would both
//! reach a limit, entries are tried in the order of their keys' names, and
//! `sluice check --quota` reports the rules that make this possible
//! ([`Domain::quota_ambiguities`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::matcher::{Domain, Level, Node, Rule};

/// A level of a rule's path: the key it matches, its exact value (`None`
/// for a key-only default or a wildcard), and its node.
#[derive(Debug, Clone, Copy)]
struct Step<'d> {
    key: &'d str,
    exact: Option<&'d str>,
    node: &'d Node,
}

/// What a bucket id matched.
#[derive(Debug, Clone)]
pub struct BucketMatch {
    pub rule: Arc<Rule>,
    /// The entries in path order, with a `share_threshold` level's configured
    /// value in place of the runtime one: buckets that share a counter in the
    /// classic service share one budget here.
    pub path: Vec<(String, String)>,
}

/// The most entries a bucket id may have for [`Domain::find_bucket`] (one bit
/// each in the search's mask).
pub const MAX_BUCKET_ENTRIES: usize = 16;

impl Domain {
    /// Finds the limit for a bucket id's entries, sorted by key; `None` when
    /// nothing limits it (or it has more than [`MAX_BUCKET_ENTRIES`]).
    pub fn find_bucket(&self, entries: &[(&str, &str)]) -> Option<BucketMatch> {
        if entries.is_empty() || entries.len() > MAX_BUCKET_ENTRIES {
            return None;
        }
        let mut walked = Vec::with_capacity(entries.len());
        let rule = search(&self.root, entries, 0, &mut walked)?;
        let path = walked
            .iter()
            .filter_map(|&(i, node)| {
                let (k, v) = entries.get(i)?;
                let v = node.shared_value.as_deref().unwrap_or(v);
                Some(((*k).to_owned(), v.to_owned()))
            })
            .collect();
        Some(BucketMatch {
            rule: rule.clone(),
            path,
        })
    }

    /// Pairs of rules one bucket id could match in two orders: the same keys
    /// along different paths, with values that can agree. Each line names both
    /// rules; the bucket goes to the one whose keys come first by name.
    pub fn quota_ambiguities(&self) -> Vec<String> {
        let mut paths: Vec<Vec<Step<'_>>> = Vec::new();
        collect(&self.root, &mut Vec::new(), &mut paths);
        // Levels are hash maps: sort so the report reads the same every time.
        paths.sort_by_cached_key(|p| label(p));
        let mut by_keys: BTreeMap<Vec<&str>, Vec<&Vec<Step<'_>>>> = BTreeMap::new();
        let mut out = Vec::new();
        for p in &paths {
            let mut keys: Vec<&str> = p.iter().map(|n| n.key).collect();
            keys.sort_unstable();
            if keys.windows(2).any(|w| w.first() == w.get(1)) {
                out.push(format!(
                    "rule '{}' names the key '{}' twice: no quota bucket can match it",
                    label(p),
                    keys.windows(2)
                        .find(|w| w.first() == w.get(1))
                        .and_then(|w| w.first())
                        .unwrap_or(&"")
                ));
                continue;
            }
            by_keys.entry(keys).or_default().push(p);
        }
        for (keys, group) in by_keys {
            // Rules whose keys come in one order are never ambiguous with
            // each other: only pairs across orders are looked at, and an
            // exact rule only against those with the same values, so a
            // million per-customer rules cost a hash each, not a pair each.
            let mut orders: BTreeMap<Vec<&str>, Vec<&Vec<Step<'_>>>> = BTreeMap::new();
            for p in group {
                orders.entry(order(p)).or_default().push(p);
            }
            let orders: Vec<Vec<&Vec<Step<'_>>>> = orders.into_values().collect();
            for (i, a) in orders.iter().enumerate() {
                for b in orders.iter().skip(i + 1) {
                    across(a, b, &keys, &mut out);
                }
            }
        }
        out
    }
}

/// Depth-first: each level consumes one unused entry, keys in name order.
fn search<'d>(
    level: &'d Level,
    entries: &[(&str, &str)],
    used: u32,
    walked: &mut Vec<(usize, &'d Node)>,
) -> Option<&'d Arc<Rule>> {
    let all = u32::MAX >> (32 - entries.len());
    for (i, (k, v)) in entries.iter().enumerate() {
        let bit = 1u32 << i;
        if used & bit != 0 {
            continue;
        }
        let Some(node) = level.find(k, v) else {
            continue;
        };
        walked.push((i, node));
        let now = used | bit;
        if now == all {
            if let Some(rule) = &node.rule {
                return Some(rule);
            }
        } else if let Some(children) = &node.children
            && let Some(rule) = search(children, entries, now, walked)
        {
            return Some(rule);
        }
        walked.pop();
    }
    None
}

fn collect<'d>(level: &'d Level, prefix: &mut Vec<Step<'d>>, out: &mut Vec<Vec<Step<'d>>>) {
    for (key, exact, node) in level.nodes() {
        prefix.push(Step { key, exact, node });
        if node.rule.is_some() {
            out.push(prefix.clone());
        }
        if let Some(children) = &node.children {
            collect(children, prefix, out);
        }
        prefix.pop();
    }
}

/// Each pair of `a` and `b` (rules with the same keys in two orders) that
/// one bucket could match, reported.
fn across(a: &[&Vec<Step<'_>>], b: &[&Vec<Step<'_>>], keys: &[&str], out: &mut Vec<String>) {
    // `b`'s rules with an exact value at every level, by those values in
    // key order; the rest are few (wildcards and key-only defaults).
    let mut exact: HashMap<Vec<&str>, Vec<&Vec<Step<'_>>>> = HashMap::new();
    let mut loose = Vec::new();
    for p in b {
        match values(p) {
            Some(v) => exact.entry(v).or_default().push(p),
            None => loose.push(*p),
        }
    }
    for pa in a {
        let candidates: Vec<&Vec<Step<'_>>> = match values(pa) {
            Some(v) => exact
                .get(&v)
                .into_iter()
                .flatten()
                .copied()
                .chain(loose.iter().copied())
                .collect(),
            None => b.to_vec(),
        };
        for pb in candidates {
            if may_agree(pa, pb) {
                out.push(format!(
                    "rules '{}' and '{}' take the same keys ({}) in different orders: \
                     a quota bucket with these keys matches the one whose keys sort first",
                    label(pa),
                    label(pb),
                    keys.join(", ")
                ));
            }
        }
    }
}

/// A path's exact values in its keys' name order, when every level has one.
fn values<'a>(path: &[Step<'a>]) -> Option<Vec<&'a str>> {
    let mut levels: Vec<Step<'a>> = path.to_vec();
    levels.sort_unstable_by(|x, y| x.key.cmp(y.key));
    levels.iter().map(|n| n.exact).collect()
}

fn order<'a>(path: &[Step<'a>]) -> Vec<&'a str> {
    path.iter().map(|n| n.key).collect()
}

fn label(path: &[Step<'_>]) -> String {
    path.last()
        .and_then(|n| n.node.rule.as_ref())
        .map_or_else(String::new, |r| r.label.to_string())
}

/// Whether one bucket could satisfy both paths: for every key, exact values
/// must be equal where both paths give one.
fn may_agree(a: &[Step<'_>], b: &[Step<'_>]) -> bool {
    a.iter().all(|na| {
        b.iter()
            .find(|nb| nb.key == na.key)
            .is_none_or(|nb| match (na.exact, nb.exact) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            })
    })
}

#[cfg(test)]
#[path = "bucket_tests.rs"]
mod tests;
