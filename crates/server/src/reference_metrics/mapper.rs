//! A statsd_exporter mapping file (`PROMETHEUS_MAPPER_YAML`, the reference's
//! `--prometheus-mapper`): each stat name is matched against its mappings,
//! glob ones first then regular expressions in order, as statsd_exporter
//! does, and becomes the mapping's `name` with its `labels` (`$1`... from
//! the match). A stat no mapping matches keeps its name, dots turned into
//! underscores; `action: drop` drops it.

use serde::Deserialize;

/// Why a mapping file was refused.
#[derive(Debug, thiserror::Error)]
pub enum MapperError {
    #[error("{path}: {why}")]
    Invalid { path: String, why: String },
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    mappings: Vec<Raw>,
}

#[derive(Debug, Deserialize)]
struct Raw {
    #[serde(rename = "match")]
    pattern: String,
    #[serde(default)]
    match_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    match_metric_type: Option<String>,
}

/// One mapping, compiled.
#[derive(Debug)]
struct Mapping {
    /// A glob's `*` matches one name segment (no dot), as a regex.
    pattern: regex::Regex,
    glob: bool,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
}

/// The mappings of one file.
#[derive(Debug, Default)]
pub struct Mapper {
    mappings: Vec<Mapping>,
}

/// A stat as Prometheus sees it: its name and labels.
pub type Mapped = (String, Vec<(String, String)>);

impl Mapper {
    /// Reads and compiles `text` (the file at `path`, named in errors).
    pub fn parse(path: &str, text: &str) -> Result<Mapper, MapperError> {
        let invalid = |why: String| MapperError::Invalid {
            path: path.to_owned(),
            why,
        };
        let file: File = serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut mappings = Vec::with_capacity(file.mappings.len());
        for (i, m) in file.mappings.into_iter().enumerate() {
            // Only counters are served here; a mapping for another type
            // matches none of them.
            if m.match_metric_type
                .as_deref()
                .is_some_and(|t| t != "counter")
            {
                continue;
            }
            let glob = match m.match_type.as_deref() {
                None | Some("glob" | "") => true,
                Some("regex") => false,
                Some(other) => return Err(invalid(format!("mappings[{i}]: match_type {other}"))),
            };
            let source = if glob {
                let parts: Vec<String> = m.pattern.split('*').map(regex::escape).collect();
                format!("^{}$", parts.join("([^.]*)"))
            } else {
                m.pattern.clone()
            };
            let pattern =
                regex::Regex::new(&source).map_err(|e| invalid(format!("mappings[{i}]: {e}")))?;
            let drop = m.action.as_deref() == Some("drop");
            let name = match (m.name, drop) {
                (Some(n), _) => n,
                (None, true) => String::new(),
                (None, false) => return Err(invalid(format!("mappings[{i}]: no name"))),
            };
            mappings.push(Mapping {
                pattern,
                glob,
                name,
                labels: m.labels.into_iter().collect(),
                drop,
            });
        }
        Ok(Mapper { mappings })
    }

    /// What `stat` is exported as, or `None` when a mapping drops it.
    pub fn map(&self, stat: &str) -> Option<Mapped> {
        let first = |glob: bool| {
            self.mappings
                .iter()
                .filter(|m| m.glob == glob)
                .find_map(|m| m.pattern.captures(stat).map(|c| (m, c)))
        };
        let Some((m, caps)) = first(true).or_else(|| first(false)) else {
            return Some((escape(stat), Vec::new()));
        };
        if m.drop {
            return None;
        }
        let expand = |template: &str| {
            let mut out = String::new();
            caps.expand(template, &mut out);
            out
        };
        let labels = m
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect();
        Some((expand(&m.name), labels))
    }
}

/// A stat name as a Prometheus name: anything but `[a-zA-Z0-9_:]` is `_`.
fn escape(stat: &str) -> String {
    stat.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "mapper_tests.rs"]
mod tests;
