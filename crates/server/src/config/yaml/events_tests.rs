use super::*;

fn serde(text: &str) -> Node {
    let options = super::super::options(FileBounds::default());
    serde_saphyr::from_str_with_options::<Node>(text, options).expect("serde reads it")
}

/// What this reads, it reads exactly as serde's reading does.
fn same(text: &str) {
    let fast = read(text, FileBounds::default()).unwrap_or_else(|| panic!("not read: {text}"));
    assert_eq!(fast, serde(text), "{text}");
}

#[test]
fn generated_rules_read_as_serde_reads_them() {
    same(
        "domain: saas\ndescriptors:\n  - key: api_key\n    value: cust1\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n",
    );
    same(
        "# made by billing\ndomain: d\ndescriptors:\n  - {key: a, value: \"x y\", rate_limit: {unit: hour, requests_per_unit: 0}}\n  - key: b\n    shadow_mode: true\n    detailed_metric: false\n    value: 'it''s'\n    descriptors: []\n",
    );
    same("domain: d\ndescriptors:\n- key: a\n  value: v1.2/x-y_z\n  rate_limit: null\n");
}

#[test]
fn anything_doubtful_is_left_to_serde() {
    for text in [
        "a: yes\n",
        "a: True\n",
        "a: 0x1f\n",
        "a: 012\n",
        "a: 1.5\n",
        "a: ~\n",
        "a:\n",
        "a: inf\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: |\n  text\n",
        "a: 1\na: 2\n",
        "a: 1\n---\nb: 2\n",
        "%YAML 1.1\n---\na: 1\n",
        "- a\n",
        "a: [1, 2\n",
        "<<: {a: 1}\n",
    ] {
        assert!(read(text, FileBounds::default()).is_none(), "{text}");
    }
}

#[test]
fn bounds_send_the_file_to_serde() {
    let tight = FileBounds {
        max_nodes: 4,
        ..FileBounds::default()
    };
    assert!(read("a: 1\nb: 2\nc: 3\n", tight).is_none());
    let nest = |n: usize| format!("a: {}1{}\n", "[".repeat(n), "]".repeat(n));
    assert!(read(&nest(MAX_DEPTH + 1), FileBounds::default()).is_none());
    assert!(read(&nest(MAX_DEPTH - DEPTH_MARGIN), FileBounds::default()).is_none());
    // What this reads at its deepest, serde reads the same.
    same(&nest(MAX_DEPTH - DEPTH_MARGIN - 1));
}

/// Every rule file the tests keep (the reference's fixtures, Envoy
/// Gateway's, sluice's examples) reads the same both ways, or is left to
/// serde.
#[test]
fn every_rule_file_the_tests_keep_reads_the_same() {
    // The workspace's root, two above this crate.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut read_here = 0;
    for dir in ["tests", "examples", "deploy", "../shared/compat"] {
        for file in walk(&root.join(dir)) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let Some(fast) = read(&text, FileBounds::default()) else {
                continue;
            };
            let options = super::super::options(FileBounds::default());
            let docs: Vec<Node> =
                serde_saphyr::from_str_multiple_with_options(&text, options).expect("serde");
            assert_eq!(docs, vec![fast], "{}", file.display());
            read_here += 1;
        }
    }
    assert!(read_here > 20, "only {read_here} files read");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(path);
        }
    }
    out
}

/// Seeded random documents of the shapes rule files take, with scalars
/// both readings could disagree on: where this reads one, serde agrees.
#[test]
fn random_documents_read_the_same_or_are_left_to_serde() {
    const SCALARS: [&str; 24] = [
        "a",
        "cust12",
        "v1.2/x-y_z",
        "0",
        "7",
        "1000000",
        "012",
        "1.5",
        "-3",
        "true",
        "false",
        "null",
        "True",
        "yes",
        "off",
        "~",
        "'q''s'",
        "\"d\\tq\"",
        "''",
        "x y",
        "inf",
        "NaN",
        "0x1f",
        "1e3",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % n as u64).unwrap_or(0)
    };
    let mut read_here = 0;
    for _ in 0..3_000 {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for _ in 0..1 + next(4) {
            let v = SCALARS[next(SCALARS.len())];
            let n = SCALARS[next(SCALARS.len())];
            match next(3) {
                0 => text.push_str(&format!("  - key: k\n    value: {v}\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}\n")),
                1 => text.push_str(&format!("  - {{key: {v}, shadow_mode: {n}}}\n")),
                _ => text.push_str(&format!("  - key: {v}\n    descriptors:\n      - key: {n}\n        value: [{v}, {n}]\n")),
            }
        }
        assert!(super::super::readings_agree(&text), "{text}");
        read_here += usize::from(read(&text, FileBounds::default()).is_some());
    }
    assert!(read_here > 100, "only {read_here} read here");
}
