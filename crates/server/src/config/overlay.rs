//! Shapes for rules a control plane pushes (`--xds-overlay`): a directory of
//! files written as rule files (`domain`, `descriptors` with `key`, `value`
//! and nested `descriptors`), whose `rate_limit` blocks hold only sluice's
//! shape fields. Each overlay descriptor is found in the pushed tree by its
//! path (the same keys and values, level by level, in the same domain) and
//! its block is read over the pushed limit: the control plane keeps the
//! number and its unit, the overlay gives the window, the algorithm, the
//! burst and the failure policy. An overlay entry that meets no pushed rule
//! is a warning (the control plane may push it later), never an error.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use super::model::{check_shape, shaped};
use super::yaml::{self, Node, Value, position};
use super::{ConfigError, DescriptorDef, DomainFile, LoadError};

/// Every overlay file of a directory, parsed and checked.
#[derive(Debug, Default)]
pub struct Overlay {
    domains: Vec<OverlayDomain>,
    fingerprint: u64,
}

#[derive(Debug)]
struct OverlayDomain {
    file: PathBuf,
    domain: String,
    nodes: Vec<OverlayNode>,
}

#[derive(Debug)]
struct OverlayNode {
    key: String,
    value: Option<String>,
    /// The `rate_limit` block as written, read over the pushed limit.
    shape: Option<Node>,
    children: Vec<OverlayNode>,
    field: String,
}

impl Overlay {
    /// Reads every `*.yaml`/`*.yml` file under `dir` (as rule files are
    /// found); any error in any file refuses the whole overlay.
    pub fn load(dir: &Path, max_files: usize) -> Result<Overlay, LoadError> {
        let (texts, mut errors) = super::read_files(dir, max_files)?;
        let mut overlay = Overlay::default();
        let mut hasher = DefaultHasher::new();
        for (file, text) in &texts {
            (file, text).hash(&mut hasher);
            match parse(file, text) {
                Ok(mut domains) => overlay.domains.append(&mut domains),
                Err(mut e) => errors.append(&mut e),
            }
        }
        overlay.fingerprint = hasher.finish();
        if errors.is_empty() {
            Ok(overlay)
        } else {
            Err(LoadError::Invalid(errors))
        }
    }

    /// What identifies the overlay's content, mixed into the rules'.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Gives the pushed rules their shapes. Returns a warning for each
    /// overlay entry that met no pushed rule with a limit.
    pub fn apply(&self, files: &mut [(PathBuf, DomainFile)]) -> Result<Vec<String>, LoadError> {
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        for od in &self.domains {
            let mut met = vec![false; od.nodes.len()];
            for (_, df) in files.iter_mut().filter(|(_, df)| df.domain == od.domain) {
                for (node, met) in od.nodes.iter().zip(met.iter_mut()) {
                    let mut ctx = Ctx {
                        file: &od.file,
                        domain: &od.domain,
                        warnings: &mut warnings,
                        errors: &mut errors,
                    };
                    *met |= ctx.apply(node, &mut df.descriptors);
                }
            }
            for (node, _) in od.nodes.iter().zip(met).filter(|(_, m)| !m) {
                warnings.push(unmet(&od.file, &od.domain, node));
            }
        }
        if errors.is_empty() {
            Ok(warnings)
        } else {
            Err(LoadError::Invalid(errors))
        }
    }
}

struct Ctx<'a> {
    file: &'a Path,
    domain: &'a str,
    warnings: &'a mut Vec<String>,
    errors: &'a mut Vec<ConfigError>,
}

impl Ctx<'_> {
    /// Applies `node` to the pushed descriptor at its path among `level`;
    /// whether one was there.
    fn apply(&mut self, node: &OverlayNode, level: &mut [Box<DescriptorDef>]) -> bool {
        let Some(d) = level
            .iter_mut()
            .find(|d| d.key == node.key && d.value == node.value)
        else {
            return false;
        };
        if let Some(shape) = &node.shape {
            match d.rate_limit.as_ref() {
                Some(pushed) => match shaped(self.file, shape, &node.field, pushed) {
                    Ok(def) => d.rate_limit = Some(def),
                    Err(mut e) => self.errors.append(&mut e),
                },
                None => self.warnings.push(format!(
                    "{}: {} in domain {} has no pushed limit to shape",
                    self.file.display(),
                    node.field,
                    self.domain
                )),
            }
        }
        for child in &node.children {
            if !self.apply(child, &mut d.descriptors) {
                self.warnings.push(unmet(self.file, self.domain, child));
            }
        }
        true
    }
}

fn unmet(file: &Path, domain: &str, node: &OverlayNode) -> String {
    let path = match &node.value {
        Some(v) => format!("{}={v}", node.key),
        None => node.key.clone(),
    };
    format!(
        "{}: {} ({path}) meets no rule pushed for domain {domain}",
        file.display(),
        node.field
    )
}

/// One overlay file: each YAML document a domain.
fn parse(file: &Path, text: &str) -> Result<Vec<OverlayDomain>, Vec<ConfigError>> {
    let roots = yaml::parse_all(text, yaml::FileBounds::default()).map_err(|e| {
        vec![ConfigError {
            file: file.to_path_buf(),
            position: e.position,
            field: String::new(),
            message: format!("error loading overlay file: {}", e.message),
        }]
    })?;
    let mut r = Reader {
        file,
        errors: Vec::new(),
    };
    let domains = roots.iter().map(|root| r.domain(root)).collect();
    if r.errors.is_empty() {
        Ok(domains)
    } else {
        Err(r.errors)
    }
}

struct Reader<'a> {
    file: &'a Path,
    errors: Vec<ConfigError>,
}

impl Reader<'_> {
    fn error(&mut self, node: &Node, field: &str, message: String) {
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            position: position(&node.referenced),
            field: field.to_owned(),
            message,
        });
    }

    fn domain(&mut self, root: &Node) -> OverlayDomain {
        let mut out = OverlayDomain {
            file: self.file.to_path_buf(),
            domain: String::new(),
            nodes: Vec::new(),
        };
        for (k, v) in self.map(root, "") {
            match key(k) {
                "domain" => out.domain = self.string(v, "domain").unwrap_or_default(),
                "descriptors" => out.nodes = self.nodes(v, "descriptors"),
                other => self.unknown(k, other),
            }
        }
        if out.domain.is_empty() {
            self.error(
                root,
                "domain",
                "an overlay needs the domain it shapes".into(),
            );
        }
        out
    }

    fn nodes(&mut self, node: &Node, path: &str) -> Vec<OverlayNode> {
        let Value::Seq(items) = &node.value else {
            let msg = format!("descriptors must be a list, not a {}", node.value.kind());
            self.error(node, path, msg);
            return Vec::new();
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.node(item, &format!("{path}[{i}]")))
            .collect()
    }

    fn node(&mut self, node: &Node, path: &str) -> OverlayNode {
        let mut out = OverlayNode {
            key: String::new(),
            value: None,
            shape: None,
            children: Vec::new(),
            field: path.to_owned(),
        };
        for (k, v) in self.map(node, path) {
            let field = format!("{path}.{}", key(k));
            match key(k) {
                "key" => out.key = self.string(v, &field).unwrap_or_default(),
                "value" => out.value = self.string(v, &field).filter(|s| !s.is_empty()),
                "rate_limit" => {
                    let mut e = check_shape(self.file, v, &field);
                    self.errors.append(&mut e);
                    out.shape = Some(v.clone());
                }
                "descriptors" => out.children = self.nodes(v, &field),
                other => self.unknown(k, other),
            }
        }
        if out.key.is_empty() {
            self.error(
                node,
                &format!("{path}.key"),
                "descriptor has empty key".into(),
            );
        }
        out
    }

    fn map<'n>(&mut self, node: &'n Node, path: &str) -> &'n [(Node, Node)] {
        match &node.value {
            Value::Map(entries) => entries,
            Value::Null => &[],
            other => {
                let msg = format!("expected a map, found a {}", other.kind());
                self.error(node, path, msg);
                &[]
            }
        }
    }

    fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(_) | Value::Bool(_) => Some(node.value.to_string()),
            Value::Null => None,
            other => {
                let msg = format!("expected a string, found a {}", other.kind());
                self.error(node, field, msg);
                None
            }
        }
    }

    fn unknown(&mut self, k: &Node, name: &str) {
        let msg = format!(
            "unknown key '{name}' in an overlay: it holds domain, descriptors (key, value, rate_limit, descriptors) and nothing else"
        );
        self.error(k, name, msg);
    }
}

fn key(k: &Node) -> &str {
    match &k.value {
        Value::Str(s) => s,
        _ => "",
    }
}

#[cfg(test)]
#[path = "overlay_tests.rs"]
mod tests;
