//! The flag reference against the commands' own help.

use super::*;

/// Every flag of every command, with its environment variable where it
/// has one, and nothing the commands do not have.
#[test]
fn the_reference_lists_every_flag_and_variable_and_no_other() {
    let page = reference("command-line.md");
    let (mut missing, mut known) = (Vec::new(), BTreeSet::new());
    for cmd in [
        "serve",
        "check",
        "bench",
        "health",
        "advise",
        "counters show",
        "counters reset",
        "counters top",
    ] {
        let out = Command::new(sluice_bin())
            .args(cmd.split(' '))
            .arg("--help")
            .output()
            .expect("sluice --help");
        let help = String::from_utf8_lossy(&out.stdout);
        for line in help.lines().map(str::trim_start) {
            if let Some(flag) = line
                .strip_prefix("--")
                .and_then(|f| f.split([' ', '=', ',']).next())
            {
                known.insert(format!("--{flag}"));
                if flag != "help" && !page.contains(&format!("`--{flag}")) {
                    missing.push(format!("{cmd} --{flag}"));
                }
            }
            if let Some(env) = line.split("[env: ").nth(1) {
                let name = env.split(['=', ']']).next().unwrap_or_default();
                known.insert(name.to_owned());
                if !page.contains(name) {
                    missing.push(format!("{cmd}: {name}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in the reference: {missing:?}");
    // Each row of the tables names a flag the commands have.
    let stale: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .filter_map(|l| l.split(['`', ' ']).next())
        .filter(|f| !known.contains(&format!("--{f}")))
        .collect();
    assert!(stale.is_empty(), "flags sluice no longer has: {stale:?}");
}

/// The book's flag table is in the groups `serve --help` shows: each flag
/// under the heading of the same name.
#[test]
fn the_flag_table_follows_the_groups_of_the_help() {
    let out = Command::new(sluice_bin())
        .args(["serve", "--help"])
        .output()
        .expect("sluice serve --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let mut by_help = BTreeSet::new();
    let mut heading = String::new();
    for line in help.lines() {
        if let Some(h) = line.strip_suffix(':').filter(|_| !line.starts_with(' ')) {
            heading = h.to_owned();
        } else if let Some(flag) = line.trim_start().strip_prefix("--") {
            let flag = flag.split([' ', '=']).next().unwrap_or_default();
            if flag != "help" {
                by_help.insert((heading.clone(), flag.to_owned()));
            }
        }
    }
    let page = reference("command-line.md");
    let serve = page
        .split("\n## ")
        .find(|s| s.starts_with("`sluice serve`"))
        .expect("the serve section");
    let mut by_book = BTreeSet::new();
    for line in serve.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            heading = h.to_owned();
        } else if let Some(row) = line.strip_prefix("| `--") {
            for flag in row.split(" | ").next().unwrap_or_default().split("`--") {
                let flag = flag.trim_start_matches("`--").split(['`', ' ']).next();
                by_book.insert((heading.clone(), flag.unwrap_or_default().to_owned()));
            }
        }
    }
    let only_help: Vec<_> = by_help.difference(&by_book).collect();
    let only_book: Vec<_> = by_book.difference(&by_help).collect();
    assert!(
        only_help.is_empty() && only_book.is_empty(),
        "in --help's group, not the book's: {only_help:?}\nin the book's group, not --help's: {only_book:?}"
    );
}
