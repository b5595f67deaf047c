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
mod tests {
    use std::path::PathBuf;

    use crate::config::{LoadOptions, Rules, load_texts};
    use crate::rule_stats::Detached;

    fn load(text: &str) -> Result<Rules, crate::config::LoadError> {
        let files = vec![(PathBuf::from("f.yaml"), text.to_owned())];
        load_texts(files, LoadOptions::default(), &Detached)
    }

    /// Rule files as control planes write them (Envoy Gateway): a `name:`
    /// at the top, `rate_limit: null` on inner levels, `value: ""` (any
    /// value, as the reference reads it), and several configs in one file.
    #[test]
    fn files_as_envoy_gateway_writes_them_mean_what_the_reference_reads() {
        let rules = load("name: gw\ndomain: api\ndescriptors:\n  - key: route\n    value: r1\n    rate_limit: null\n    descriptors:\n      - key: user\n        value: \"\"\n        rate_limit: {unit: minute, requests_per_unit: 2}\n---\nname: other\ndomain: second\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
            .expect("loads");
        let api = rules.domain("api").expect("api");
        let found = api
            .find(&[("route", "r1"), ("user", "bob")])
            .expect("any user");
        assert_eq!(&*found.rule.path, "route_r1.user");
        assert!(
            api.find(&[("route", "r1")]).is_none(),
            "null: no limit above"
        );
        assert!(rules.domain("second").is_some(), "the second document");
        // Empty and absent values are one key: two of them collide.
        let dup = load(
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: user\n    value: \"\"\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        );
        assert!(dup.is_err_and(|e| e.to_string().contains("duplicate")));
        let two = super::parse_file(
            std::path::Path::new("f.yaml"),
            "domain: a\n---\ndomain: b\n",
        );
        assert!(two.is_err_and(|e| e[0].to_string().contains("2 YAML documents")));
    }
}
