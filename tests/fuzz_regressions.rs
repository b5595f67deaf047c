//! The inputs kept from fuzzing (`fuzz/regressions/`) replay through the
//! fuzz targets' own code on every `make test`, and the hostile ones get the
//! clear error they deserve.

use std::path::PathBuf;

use sluice::config::{LoadOptions, load_dir};
use sluice::metrics::Metrics;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no regressions kept for {target}");
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect()
}

#[test]
fn config_inputs_replay_without_panic() {
    for (path, bytes) in inputs("config") {
        eprintln!("{}", path.display());
        sluice::fuzzing::config(&bytes);
    }
}

#[test]
fn request_inputs_replay_without_panic() {
    for (path, bytes) in inputs("request") {
        eprintln!("{}", path.display());
        sluice::fuzzing::request(&bytes);
    }
}

#[test]
fn alias_bombs_and_deep_nesting_are_refused_by_name() {
    for (name, expect) in [
        ("billion-laughs.yaml", "budget breached"),
        ("deep-nesting.yaml", "budget breached"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/regressions/config")
            .join(name);
        std::fs::copy(&src, dir.path().join(name)).expect("copy");
        let err = load_dir(dir.path(), LoadOptions::default(), &Metrics::default())
            .err()
            .unwrap_or_else(|| panic!("{name} loaded"))
            .to_string();
        assert!(err.contains(name) && err.contains(expect), "{name}: {err}");
    }
}

#[test]
fn the_deepest_allowed_tree_loads_on_a_small_stack() {
    // 18 levels of descriptors: within the YAML depth budget. Test threads
    // have 2 MiB of stack, as reload threads do.
    let mut yaml = String::from("domain: d\ndescriptors:\n");
    let mut indent = String::from("  ");
    for _ in 0..18 {
        yaml.push_str(&format!("{indent}- key: k\n{indent}  descriptors:\n"));
        indent.push_str("    ");
    }
    yaml.push_str(&format!(
        "{indent}- key: end\n{indent}  rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("deep.yaml"), yaml).expect("write");
    let rules = load_dir(dir.path(), LoadOptions::default(), &Metrics::default()).expect("loads");
    assert_eq!(rules.summary(), [("d".to_owned(), 1)]);
}
