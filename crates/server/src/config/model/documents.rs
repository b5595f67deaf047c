//! A rule file's text into domains: each YAML document of it (`---`
//! between them) parsed, checked as the reference's first pass checks it,
//! and read into its domain.

use std::path::Path;

use super::{ConfigError, DomainFile, Parser, split, yaml};
use crate::config::yaml::FileBounds;

/// Parses and validates one file on its own (cross-file rules are checked when
/// the directory is compiled): its one domain.
pub fn parse_file(file: &Path, text: &str) -> Result<DomainFile, Vec<ConfigError>> {
    let mut docs = parse_documents(file, text, FileBounds::default())?;
    if docs.len() > 1 {
        return Err(vec![ConfigError {
            file: file.to_path_buf(),
            position: None,
            field: String::new(),
            message: format!("{} YAML documents where one was expected", docs.len()),
        }]);
    }
    Ok(docs.swap_remove(0))
}

/// Parses and validates every document of one file (`---` between them),
/// each a domain: a file that holds several configs, as Envoy Gateway's
/// generated rule files do, loads them all (the reference read the first
/// and dropped the rest without a word).
pub fn parse_documents(
    file: &Path,
    text: &str,
    bounds: FileBounds,
) -> Result<Vec<DomainFile>, Vec<ConfigError>> {
    // A big generated file, one long list: read in parts on every core.
    if text.len() <= bounds.max_bytes
        && let Some(parts) = split::split(text, split::MIN_SPLIT_BYTES, split::PART_BYTES)
        && let Some(df) = split::read(file, &parts, bounds)
    {
        return Ok(vec![df]);
    }
    let roots = yaml::parse_all(text, bounds).map_err(|e| {
        vec![ConfigError {
            file: file.to_path_buf(),
            position: e.position,
            field: String::new(),
            message: format!("error loading config file: {}", e.message),
        }]
    })?;
    let mut p = Parser {
        file,
        errors: Vec::new(),
    };
    for root in &roots {
        p.check_generic(root, "", false);
    }
    if !p.errors.is_empty() {
        return Err(p.errors);
    }
    let parsed: Vec<DomainFile> = roots.iter().map(|root| p.domain_file(root)).collect();
    if p.errors.is_empty() {
        Ok(parsed)
    } else {
        Err(p.errors)
    }
}

#[cfg(test)]
#[path = "documents_tests.rs"]
mod tests;
