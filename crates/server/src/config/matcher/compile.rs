//! Compiling parsed rule files into the matcher's tree: once per load, off
//! the request path. Built to take a million per-customer rules in a few
//! seconds: each level's maps are sized once, and every definition is
//! consumed (freed) as its node is built.

use std::path::PathBuf;
use std::sync::Arc;

use super::super::error::ConfigError;
use super::super::model::{Defs, DescriptorDef, DomainFile, Origin, RateLimitDef};
use super::{Domain, FastMap, KeyNodes, Level, Node, Pattern, Rule};
use crate::rule_stats::RuleCounters;

/// Compiles parsed files into domains. `merge` lets one domain span files.
pub fn compile(
    files: Vec<(PathBuf, DomainFile)>,
    merge: bool,
    counters: &dyn RuleCounters,
) -> Result<FastMap<Arc<str>, Domain>, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut grouped: Vec<(Arc<str>, Defs)> = Vec::new();
    for (file, df) in files {
        match grouped.iter_mut().find(|(d, _)| **d == *df.domain) {
            Some((_, descriptors)) if merge => descriptors.extend(df.descriptors),
            Some(_) => errors.push(ConfigError {
                file,
                position: None,
                field: "domain".into(),
                message: format!("duplicate domain '{}' in config file", df.domain),
            }),
            None => grouped.push((Arc::from(df.domain.as_str()), df.descriptors)),
        }
    }
    let mut domains = FastMap::default();
    for (name, descriptors) in grouped {
        let mut c = Compiler {
            domain: name.clone(),
            counters,
            errors: &mut errors,
            rules: Vec::new(),
            needs_path: false,
        };
        let root = c.level(descriptors, &name);
        let (rules, needs_path) = (c.rules, c.needs_path);
        let override_stats = counters.counters(&name, &Arc::from("_override"));
        domains.insert(
            name,
            Domain {
                root,
                rules,
                override_stats,
                needs_path,
            },
        );
    }
    if errors.is_empty() {
        Ok(domains)
    } else {
        Err(errors)
    }
}

type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// A level's keys, each with room for exactly its values (a level of a
/// million per-customer values is otherwise rehashed twenty times, each
/// time touching fresh pages), and whether it has more than one key.
fn sized(defs: &[Box<DescriptorDef>]) -> (FastMap<Box<str>, KeyNodes>, bool) {
    let mut counts: FastMap<&str, usize> = FastMap::default();
    for d in defs.iter().filter(|d| !d.is_pattern()) {
        *counts.entry(d.key.as_str()).or_default() += usize::from(d.value.is_some());
    }
    let several = counts.len() > 1;
    let keys = counts
        .into_iter()
        .map(|(key, n)| {
            let mut nodes = KeyNodes::default();
            nodes.values.reserve(n);
            (Box::from(key), nodes)
        })
        .collect();
    (keys, several)
}

struct Compiler<'a> {
    domain: Arc<str>,
    counters: &'a dyn RuleCounters,
    errors: &'a mut Vec<ConfigError>,
    rules: Vec<Arc<Rule>>,
    needs_path: bool,
}

impl Compiler<'_> {
    /// Compiles one level, consuming its definitions so each is freed as
    /// soon as its node is built (a million rules are never held twice).
    fn level(&mut self, defs: Defs, parent: &str) -> Level {
        let (keys, several) = sized(&defs);
        let mut level = Level {
            keys,
            wildcards: Vec::new(),
        };
        // The reference's identity is `key_value`, which two keys can
        // share (`a_b` and `a`=`b`); under one key the maps below tell a
        // duplicate, and only patterns need the set.
        let mut seen = FastSet::default();
        if several {
            seen.reserve(defs.len());
        }
        for d in defs {
            let composite = d.composite();
            let full = format!("{parent}.{composite}");
            let wild = d.is_pattern();
            if (several || wild) && !seen.insert(Box::<str>::from(composite.as_str())) {
                self.duplicate(&d.origin, &full);
                continue;
            }
            if wild {
                let pattern = Pattern::new(&composite, &d.key);
                let (node, _, _) = self.node(*d, &full);
                level.wildcards.push((pattern, node));
                continue;
            }
            let taken = level
                .keys
                .get(d.key.as_str())
                .is_some_and(|k| match &d.value {
                    Some(v) => k.values.contains_key(v.as_str()),
                    None => k.default.is_some(),
                });
            if taken {
                self.duplicate(&d.origin, &full);
                continue;
            }
            // Every key is in the map already (`sized`): the node's key is
            // that map's, and its value the key of the map below.
            let (node, key, value) = self.node(*d, &full);
            let slot = match level.keys.get_mut(key.as_str()) {
                Some(slot) => slot,
                None => level.keys.entry(key.into_boxed_str()).or_default(),
            };
            match value {
                Some(v) => {
                    slot.values.insert(v.into_boxed_str(), node);
                }
                None => slot.default = Some(node),
            }
        }
        level
    }

    fn duplicate(&mut self, origin: &Origin, full: &str) {
        self.errors.push(ConfigError {
            file: origin.file.clone(),
            position: origin.position,
            field: origin.field.clone(),
            message: format!("duplicate descriptor composite key '{full}'"),
        });
    }

    fn rule(
        &mut self,
        d: &DescriptorDef,
        rl: &RateLimitDef,
        path: &Arc<str>,
        stats_path: Option<&str>,
        also: Box<[Arc<Rule>]>,
    ) -> Arc<Rule> {
        // A single `rate_limit` is counted under its own path: one string.
        let label = stats_path.map_or_else(|| path.clone(), Arc::from);
        let rule = Arc::new(Rule {
            domain: self.domain.clone(),
            stats: self.counters.counters(&self.domain, &label),
            path: path.clone(),
            label,
            limit: rl.limit,
            name: rl.name.as_deref().map(Box::from),
            replaces: rl.replaces.iter().map(|r| Box::from(r.as_str())).collect(),
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            metadata: d.metadata.clone().map(Box::new),
            on_failure: rl.on_failure,
            refundable: rl.refundable,
            leased_allowance: rl.leased_allowance,
            count_after: rl.count_after == Some(true),
            also,
        });
        self.rules.push(rule.clone());
        rule
    }

    /// The node of `d`, and `d`'s key and value given back to key the maps
    /// that hold it.
    fn node(&mut self, d: DescriptorDef, full: &str) -> (Node, String, Option<String>) {
        let path: Arc<str> = Arc::from(full.get(self.domain.len() + 1..).unwrap_or_default());
        let path = &path;
        self.needs_path |= d.share_threshold || d.value_to_metric || d.detailed_metric;
        let rule = match (&d.rate_limit, d.rate_limits.split_first()) {
            (Some(rl), _) => Some(self.rule(&d, rl, path, None, Box::default())),
            (None, Some((first, rest))) => {
                // Each limit of the list counts under its own stats path.
                let sub = |i: usize, rl: &RateLimitDef| match &rl.name {
                    Some(n) => format!("{path}:{n}"),
                    None => format!("{path}:{i}"),
                };
                let also: Box<[Arc<Rule>]> = rest
                    .iter()
                    .enumerate()
                    .map(|(i, rl)| {
                        let stats = sub(i + 1, rl);
                        self.rule(&d, rl, path, Some(&stats), Box::default())
                    })
                    .collect();
                let stats = sub(0, first);
                Some(self.rule(&d, first, path, Some(&stats), also))
            }
            (None, None) => None,
        };
        let children =
            (!d.descriptors.is_empty()).then(|| Box::new(self.level(d.descriptors, full)));
        let node = Node {
            rule,
            children,
            shared_value: d
                .share_threshold
                .then(|| Box::from(d.value.as_deref().unwrap_or(&d.key))),
            value_to_metric: d.value_to_metric,
        };
        (node, d.key, d.value)
    }
}
