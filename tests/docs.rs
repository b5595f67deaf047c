//! The README cannot lie about where it points: every `(#anchor)` link
//! names a heading it has, every relative link names a file in the
//! repository, and every rule file it shows (a YAML block starting with
//! `domain:`) passes `sluice check`.

mod common;

use common::{config_dir, sluice_check, workspace};
use std::collections::BTreeSet;

/// GitHub's anchor for a heading: lowercase, punctuation dropped except
/// `-` and `_`, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The targets of `](...)` links in `text`.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t.to_owned()))
        .collect()
}

#[test]
fn every_link_of_the_readme_resolves() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let anchors: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect();
    let mut broken = Vec::new();
    for target in links(&readme) {
        if target.starts_with("http://") || target.starts_with("https://") {
            continue;
        }
        match target.strip_prefix('#') {
            Some(anchor) if !anchors.contains(anchor) => broken.push(target.clone()),
            Some(_) => {}
            None if !workspace().join(&target).exists() => broken.push(target.clone()),
            None => {}
        }
    }
    assert!(
        broken.is_empty(),
        "links that resolve to nothing: {broken:?}"
    );
    assert_eq!(
        slug("Is my limit applied? `sluice check --envoy`"),
        "is-my-limit-applied-sluice-check---envoy"
    );
}

#[test]
fn every_rule_file_the_readme_shows_passes_sluice_check() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(block, _)| block))
        .filter(|b| b.trim_start().starts_with("domain:"))
        .collect();
    assert!(!blocks.is_empty(), "the README shows no rule file");
    for block in blocks {
        let dir = config_dir(&[("shown.yaml", block)]);
        let out = sluice_check(dir.path());
        assert!(
            out.status.success(),
            "a rule file the README shows fails sluice check:\n{block}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
