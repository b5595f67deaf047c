//! Rules: the YAML model, its validation, the compiled matcher, and loading a
//! whole directory into one immutable snapshot. `sluice check`, startup and
//! reloads all go through [`load_dir`], so `check` accepts exactly what the
//! server would.

mod error;
mod live;
mod matcher;
mod model;
mod yaml;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use error::{ConfigError, LoadError};
pub use live::{ConfigStatus, LiveRules, Loaded, Reloaded};
pub use matcher::{Domain, Match, Rule};
pub use model::{LimitDef, VALID_KEYS, parse_file};

use crate::metrics::Metrics;

/// How deep the loader follows directories, so a symlink loop cannot hang it.
const MAX_DEPTH: usize = 16;

/// Settings that change how a directory is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Allow one domain to be spread over several files.
    pub merge_domains: bool,
}

/// One load's rules, immutable once built.
#[derive(Debug, Default)]
pub struct Rules {
    domains: HashMap<Arc<str>, Domain>,
    files: Vec<PathBuf>,
}

impl Rules {
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Domains with their rule counts, sorted by name.
    pub fn summary(&self) -> Vec<(String, usize)> {
        let mut out: Vec<_> = self
            .domains
            .iter()
            .map(|(name, d)| (name.to_string(), d.rules().len()))
            .collect();
        out.sort();
        out
    }

    /// The files the rules came from.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// One line per rule, sorted, in the reference's `/rlconfig` format.
    pub fn dump(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .domains
            .values()
            .flat_map(|d| d.rules())
            .map(|r| {
                let limit = match r.limit {
                    LimitDef::Unlimited => "unlimited=true".to_owned(),
                    LimitDef::Limited {
                        unit,
                        requests_per_unit,
                    } => format!("unit={unit} requests_per_unit={requests_per_unit}"),
                };
                format!(
                    "{}.{}: {limit}, shadow_mode: {}, quota_mode: {}",
                    r.domain, r.path, r.shadow_mode, r.quota_mode
                )
            })
            .collect();
        lines.sort();
        lines
    }
}

/// Reads, validates and compiles every `*.yaml`/`*.yml` file under `dir`,
/// skipping dot-files and dot-directories (Kubernetes' `..data`). Either the
/// whole directory is valid or every error is returned.
pub fn load_dir(dir: &Path, opts: LoadOptions, metrics: &Metrics) -> Result<Rules, LoadError> {
    let mut files = Vec::new();
    collect(dir, 0, &mut files)?;
    files.sort();
    if files.is_empty() {
        return Err(LoadError::Empty(dir.to_path_buf()));
    }
    let mut parsed = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for file in &files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(ConfigError {
                    file: file.clone(),
                    position: None,
                    field: String::new(),
                    message: format!("error loading config file: {e}"),
                });
                continue;
            }
        };
        match parse_file(file, &text) {
            Ok(df) => parsed.push((file.clone(), df)),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(LoadError::Invalid(errors));
    }
    let domains =
        matcher::compile(parsed, opts.merge_domains, metrics).map_err(LoadError::Invalid)?;
    Ok(Rules { domains, files })
}

fn collect(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let unreadable = |e: std::io::Error| LoadError::Directory(dir.to_path_buf(), e.to_string());
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let hidden = path
            .file_name()
            .is_none_or(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        // metadata() follows symlinks: ConfigMap files are links into `..data`.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() && depth < MAX_DEPTH {
            collect(&path, depth + 1, out)?;
        } else if meta.is_file() && is_yaml(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

#[cfg(test)]
mod tests;
