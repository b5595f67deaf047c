//! Rooms a reader can take in: every Rust file of the workspace (its crates,
//! its integration tests, benches and examples) under 400 lines, and every
//! function under 60, counted from its signature to its closing brace.

use std::path::{Path, PathBuf};

use super::rust_files;

const MAX_FILE_LINES: usize = 400;
const MAX_FN_LINES: usize = 60;

/// Each function's name and its lines, signature to closing brace; a
/// declaration without a body (a trait's) is not one.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let indent = &line[..line.len() - line.trim_start().len()];
        // Where the signature ends: a body opens, or a declaration ends.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let end = lines[open].trim_end();
        if end.ends_with(';') || end.ends_with('}') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(last) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            out.push((name, last - i + 1));
        }
    }
    out
}

/// The name of the function a line starts, if it starts one.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("async ").unwrap_or(rest);
    let rest = rest.strip_prefix("fn ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn workspace_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples", "crates"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    files.sort();
    files
}

#[test]
fn every_file_is_under_400_lines_and_every_function_under_60() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = workspace_files();
    assert!(files.len() > 200, "{} Rust files found", files.len());
    let mut over = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read");
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            over.push(format!("{name}: {n} lines"));
        }
        for (f, len) in functions(&text) {
            if len > MAX_FN_LINES {
                over.push(format!("{name}: fn {f} is {len} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over {MAX_FILE_LINES} lines or functions over {MAX_FN_LINES}:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_size_check_counts_bodies_and_skips_declarations() {
    let long_body = "    x();\n".repeat(3);
    let text = format!(
        "pub(crate) async fn a(\n    x: u8,\n) -> u8 {{\n{long_body}}}\n\ntrait T {{\n    fn decl(&self) -> bool;\n    fn one(&self) {{}}\n    fn inner(&self) {{\n        y();\n    }}\n}}\n"
    );
    assert_eq!(
        functions(&text),
        [("a".to_owned(), 7), ("inner".to_owned(), 3)]
    );
    assert_eq!(fn_name("let f = |x| x;"), None);
    assert_eq!(fn_name("    pub fn b<T>() {"), Some("b".to_owned()));
}
