//! The house stays one-way. The crates are kept so by the compiler
//! (`sluice` above `sluice-server` above `sluice-store` above
//! `sluice-core`); inside the two biggest, `sluice-server` and `sluice`, no
//! two top-level modules may import each other, directly or around a loop. Doc comments and unit tests are not imports, and are not
//! read. Unit tests follow one convention (see
//! [`every_unit_test_module_follows_the_one_convention`]), and files and
//! functions stay small (`sizes`). See docs/src/design/code-map.md.

#[path = "house/sizes.rs"]
mod sizes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// For each module, the modules it imports and the files that do.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments and its `tests` module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` names through `crate::`, grouped imports
/// (`use crate::{a, b::c}`) included.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.insert(ident(rest).to_owned());
            continue;
        };
        // Top-level items of the group: after `{` and after each `,` at depth 0.
        let mut depth = 0;
        let mut start = true;
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && !c.is_whitespace() => {
                    out.insert(ident(&group[j..]).to_owned());
                    start = false;
                }
                _ => {}
            }
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module = |p: &Path| {
        let rel = p.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a file");
        let name = first.as_os_str().to_string_lossy();
        name.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| module(p)).collect();
    let mut g = Graph::new();
    for p in &files {
        let rel = p
            .strip_prefix(src)
            .expect("under src")
            .display()
            .to_string();
        if rel.contains("_tests") || rel.ends_with("tests.rs") || rel.contains("tests/") {
            continue;
        }
        let from = module(p);
        let text = std::fs::read_to_string(p).expect("readable");
        for to in imports(&code(&text)) {
            if to != from && modules.contains(&to) {
                let edge = g.entry(from.clone()).or_default().entry(to).or_default();
                edge.insert(rel.clone());
            }
        }
    }
    g
}

/// A loop of imports, as the modules along it (the first again at the end).
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut found = path[at..].to_vec();
            found.push(m.to_owned());
            return Some(found);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for to in g.get(m).into_iter().flat_map(|e| e.keys()) {
            if let Some(c) = visit(g, to, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_of_each_crate_import_one_way() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The server's rooms, then the command line's and the tools'.
    for (dir, rooms, imports) in [("crates/server/src", 15, 50), ("src", 2, 3)] {
        let g = graph(&root.join(dir));
        let edges: usize = g.values().map(BTreeMap::len).sum();
        assert!(
            g.len() >= rooms && edges >= imports,
            "{dir}: {} modules import, {edges} imports",
            g.len()
        );
        if let Some(c) = cycle(&g) {
            let shown: Vec<String> = c
                .windows(2)
                .map(|w| format!("{} -> {} (in {:?})", w[0], w[1], g[&w[0]][&w[1]]))
                .collect();
            panic!(
                "{dir}: modules import each other around a loop:\n{}",
                shown.join("\n")
            );
        }
    }
}

#[test]
fn a_loop_of_imports_is_found_and_comments_and_groups_are_read_right() {
    let code = code(
        "use crate::a::X;\n// crate::commented\nuse crate::{b::Y, c, d::{e, f}};\nfn g() { crate::h::i(); }\n#[cfg(test)]\nmod tests { use crate::t; }\n",
    );
    let got: Vec<String> = imports(&code).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "h"]);
    let mut g = Graph::new();
    for (from, to) in [("x", "y"), ("y", "z"), ("z", "x"), ("w", "x")] {
        g.entry(from.into())
            .or_default()
            .entry(to.into())
            .or_default();
    }
    assert_eq!(
        cycle(&g),
        Some(vec!["x".into(), "y".into(), "z".into(), "x".into()])
    );
    g.get_mut("z").unwrap().clear();
    assert_eq!(cycle(&g), None);
}

/// What is wrong with how `file` (named `name`) declares its unit tests:
/// each test module is `mod tests;` under `#[cfg(test)]`, in `x_tests.rs`
/// for `x.rs` and in `tests.rs` for a `mod.rs` or `lib.rs`; none inline.
fn test_convention(name: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let owner = name == "mod.rs" || name == "lib.rs";
    let want = if owner {
        None
    } else {
        Some(format!(
            "#[path = \"{}_tests.rs\"]",
            name.trim_end_matches(".rs")
        ))
    };
    let mut wrong = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let attrs: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#["))
            .copied()
            .collect();
        if !attrs.contains(&"#[cfg(test)]") || !line.contains("mod ") {
            continue;
        }
        let path = attrs.iter().find(|a| a.starts_with("#[path"));
        // A suite another module's tests borrow from may be `pub(crate)`.
        if line.trim_start_matches("pub(crate) ") != "mod tests;" {
            wrong.push(format!("line {}: `{line}`, not `mod tests;`", i + 1));
        } else if path.map(|p| p.to_string()) != want {
            wrong.push(format!("line {}: tests at {path:?}, not {want:?}", i + 1));
        }
    }
    wrong
}

#[test]
fn every_unit_test_module_follows_the_one_convention() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates"))
        .expect("crates")
        .flatten()
    {
        rust_files(&krate.path().join("src"), &mut files);
    }
    assert!(files.len() > 150, "{} files", files.len());
    let mut wrong = Vec::new();
    let mut declared = 0;
    for p in &files {
        let name = p.file_name().expect("a name").to_string_lossy();
        let text = std::fs::read_to_string(p).expect("readable");
        declared += text.matches("#[cfg(test)]\n").count();
        wrong.extend(
            test_convention(&name, &text)
                .into_iter()
                .map(|w| format!("{}: {w}", p.display())),
        );
        // A tests file has its module beside it.
        if let Some(stem) = name.strip_suffix("_tests.rs") {
            let module = p.with_file_name(format!("{stem}.rs"));
            let owns = std::fs::read_to_string(&module)
                .is_ok_and(|m| m.contains(&format!("#[path = \"{name}\"]\nmod tests;")));
            if !owns {
                wrong.push(format!(
                    "{}: no {} declares it",
                    p.display(),
                    module.display()
                ));
            }
        }
    }
    assert!(declared > 60, "{declared} test modules");
    assert!(
        wrong.is_empty(),
        "unit tests off the convention:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_convention_check_finds_inline_misnamed_and_misplaced_tests() {
    let ok = "fn f() {}\n\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod tests;\n";
    assert!(test_convention("x.rs", ok).is_empty());
    assert!(test_convention("mod.rs", "#[cfg(test)]\nmod tests;\n").is_empty());
    for (name, text) in [
        ("x.rs", "#[cfg(test)]\nmod tests {\n}\n"),
        ("x.rs", "#[cfg(test)]\nmod tests;\n"),
        (
            "x.rs",
            "#[cfg(test)]\n#[path = \"y_tests.rs\"]\nmod tests;\n",
        ),
        ("mod.rs", "#[cfg(test)]\nmod shape_tests;\n"),
        (
            "lib.rs",
            "#[cfg(test)]\n#[path = \"other.rs\"]\nmod tests;\n",
        ),
    ] {
        assert_eq!(test_convention(name, text).len(), 1, "{name}: {text}");
    }
}
