//! The README and the book (`docs/src`) cannot lie: every link and anchor
//! resolves; every rule file they show passes `sluice check` and every full
//! Envoy config `envoy --mode validate`; the reference pages name every
//! flag, environment variable, endpoint and metric sluice has, and nothing
//! it does not.
//!
//! A YAML block that is meant to be wrong is fenced ` ```yaml wrong `; a
//! piece of an Envoy config ` ```yaml fragment `; a whole Envoy config
//! ` ```yaml envoy `.

mod common;
#[path = "docs/flags.rs"]
mod flags;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::stack::envoy_bin;
use common::{config_dir, exported_families, metric_families, sluice_bin, sluice_check, workspace};

/// mdBook's (and GitHub's) anchor for a heading: lowercase, punctuation
/// dropped except `-` and `_`, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The README and every page of the book.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("docs/src").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![workspace().join("README.md")];
    walk(&workspace().join("docs/src"), &mut out);
    out.sort();
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// The targets of `](...)` links in `text`, outside code.
fn links(text: &str) -> Vec<String> {
    prose(text)
        .join("\n")
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t.to_owned()))
        .collect()
}

/// The broken links of page `p`.
fn broken(p: &Path) -> Vec<String> {
    let text = read(p);
    let here = p.parent().expect("a directory");
    let mut out = Vec::new();
    for target in links(&text) {
        if target.starts_with("http://") || target.starts_with("https://") {
            continue;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let path = if file.is_empty() {
            p.to_path_buf()
        } else {
            here.join(file)
        };
        // A built book opens files only: a link to a folder leads nowhere
        // (the README, read on a forge, may link one).
        let in_book = p.components().any(|c| c.as_os_str() == "docs");
        let ok = (path.is_file() || (!in_book && path.exists()))
            && (anchor.is_empty() || anchors(&read(&path)).contains(anchor))
            && path.starts_with(workspace());
        if !ok {
            out.push(format!("{}: {target}", p.display()));
        }
    }
    out
}

#[test]
fn every_link_and_anchor_of_the_readme_and_the_book_resolves() {
    let bad: Vec<String> = pages().iter().flat_map(|p| broken(p)).collect();
    assert!(bad.is_empty(), "links that resolve to nothing: {bad:#?}");
    assert_eq!(
        slug("Is my limit applied? `sluice check --envoy`"),
        "is-my-limit-applied-sluice-check---envoy"
    );
    // The test itself finds a broken link and a broken anchor.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("p.md");
    std::fs::write(&page, "# A\n[x](#a) [y](#b) [z](nowhere.md)\n").unwrap();
    assert_eq!(broken(&page).len(), 2 + 1, "outside the workspace too");
    // A book page's link to a folder is broken.
    let book = workspace().join("target/docs");
    std::fs::create_dir_all(&book).unwrap();
    let folder = book.join("folder-link-test.md");
    std::fs::write(
        &folder,
        "[k](../../deploy/kubernetes) [d](../../deploy/kubernetes/sluice.yaml)\n",
    )
    .unwrap();
    let found = broken(&folder);
    std::fs::remove_file(&folder).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn the_readme_is_read_in_five_minutes() {
    let lines = read(&workspace().join("README.md")).lines().count();
    assert!(lines < 200, "README.md has {lines} lines");
}

/// The YAML blocks of every page fenced with `info` (` ```yaml` + info).
fn blocks(info: &str) -> Vec<(PathBuf, String)> {
    let fence = format!("```yaml{info}\n");
    let mut out = Vec::new();
    for p in pages() {
        let text = read(&p);
        for b in text.split(&fence).skip(1) {
            if let Some((block, _)) = b.split_once("```") {
                out.push((p.clone(), block.to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_rule_file_shown_passes_sluice_check() {
    let rules: Vec<_> = blocks("")
        .into_iter()
        .filter(|(_, b)| b.trim_start().starts_with("domain:"))
        .collect();
    assert!(rules.len() >= 2, "the docs show {} rule files", rules.len());
    for (page, block) in rules {
        let dir = config_dir(&[("shown.yaml", &block)]);
        let out = sluice_check(dir.path());
        assert!(
            out.status.success(),
            "{}: a rule file fails sluice check:\n{block}\n{}",
            page.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Blocks meant to be wrong are wrong.
    for (page, block) in blocks(" wrong") {
        let dir = config_dir(&[("shown.yaml", &block)]);
        assert!(
            !sluice_check(dir.path()).status.success(),
            "{}: a block marked wrong passes:\n{block}",
            page.display()
        );
    }
}

#[test]
fn every_envoy_config_shown_passes_envoy_validate() {
    let configs = blocks(" envoy");
    assert!(!configs.is_empty(), "the book shows no whole Envoy config");
    let dir = tempfile::tempdir().unwrap();
    for (i, (page, block)) in configs.iter().enumerate() {
        let file = dir.path().join(format!("envoy{i}.yaml"));
        std::fs::write(&file, block).unwrap();
        let out = Command::new(envoy_bin())
            .args(["--mode", "validate", "--log-level", "error", "-c"])
            .arg(&file)
            .output()
            .expect("envoy (make deps installs it)");
        assert!(
            out.status.success(),
            "{}: an Envoy config fails validation:\n{block}\n{}{}",
            page.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn reference(page: &str) -> String {
    read(&workspace().join("docs/src/reference").join(page))
}

/// The admin port's routes, as `METHOD /path`, from the router.
fn routes() -> BTreeSet<String> {
    let src = read(&workspace().join("crates/server/src/admin/mod.rs"));
    src.split(".route(\"")
        .skip(1)
        .filter_map(|r| {
            let (path, rest) = r.split_once('"')?;
            let method = rest.trim_start_matches([',', ' ']).split('(').next()?;
            Some(format!("{} {path}", method.to_uppercase()))
        })
        .collect()
}

#[test]
fn the_reference_lists_every_endpoint_and_no_other() {
    let page = reference("endpoints.md");
    let routes = routes();
    assert!(routes.len() >= 10, "{routes:?}");
    let missing: Vec<_> = routes
        .iter()
        .filter(|r| !page.contains(&format!("`{r}")))
        .collect();
    assert!(missing.is_empty(), "not in the reference: {missing:?}");
    let stale: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|e| e.starts_with("GET /") || e.starts_with("POST /"))
        .map(|e| e.split(['?', ' ']).take(2).collect::<Vec<_>>().join(" "))
        .filter(|e| !routes.contains(e))
        .collect();
    assert!(
        stale.is_empty(),
        "endpoints sluice does not serve: {stale:?}"
    );
}

#[test]
fn the_reference_lists_every_metric_and_no_other() {
    let exported = exported_families();
    assert!(exported.len() >= 20, "{exported:?}");
    let listed = metric_families(&reference("endpoints.md"));
    let missing: Vec<_> = exported.difference(&listed).collect();
    assert!(missing.is_empty(), "not in the reference: {missing:?}");
    // Families that show once their first sample exists (per rule, per
    // quota bucket, counters endpoints) are exported by a loaded sluice;
    // a name the reference lists must at least be in the source.
    let src = sources();
    let stale: Vec<_> = listed
        .iter()
        .filter(|n| !exported.contains(*n) && !src.contains(&format!("\"{n}")))
        .collect();
    assert!(stale.is_empty(), "metrics sluice does not have: {stale:?}");
}

/// Every Rust source of the workspace's crates, concatenated.
fn sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).expect("src").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&read(&p));
            }
        }
    }
    let mut out = String::new();
    walk(&workspace().join("src"), &mut out);
    walk(&workspace().join("crates"), &mut out);
    out
}

/// The code map's rooms: every file or folder it names in backticks
/// (`store/`, `resilient.rs`, `tests/chaos.rs`, `stream/state.rs` inside
/// its folder's line) is in the tree: some path under `src/`, `crates/` or
/// `tests/` ends with it.
#[test]
fn every_room_the_code_map_names_exists() {
    let root = workspace();
    let map = read(&root.join("docs/src/design/code-map.md"));
    let mut paths = Vec::new();
    fn walk(dir: &Path, paths: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            paths.push(format!("/{}", p.display()));
            if p.is_dir() {
                walk(&p, paths);
            }
        }
    }
    for dir in ["src", "crates", "tests"] {
        walk(&root.join(dir), &mut paths);
    }
    let mut named = 0;
    let gone: Vec<&str> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains(' ') && (t.ends_with(".rs") || t.ends_with('/')))
        .inspect(|_| named += 1)
        .filter(|t| {
            let tail = format!("/{}", t.trim_end_matches('/'));
            !paths.iter().any(|p| p.ends_with(&tail))
        })
        .collect();
    assert!(named > 40, "only {named} rooms named");
    assert!(
        gone.is_empty(),
        "the code map names rooms that are gone: {gone:?}"
    );
}
