//! The one-line summary of what a reload changed.

/// `api 7 rules (was 6), +shop 2 rules, -old`: domains added, removed, or whose
/// rule count changed; "rules edited" when only the rules' contents did.
pub(super) fn describe_changes(before: &[(String, usize)], after: &[(String, usize)]) -> String {
    let mut parts = Vec::new();
    for (d, n) in after {
        match before.iter().find(|(b, _)| b == d) {
            None => parts.push(format!("+{d} {n} rules")),
            Some((_, was)) if was != n => parts.push(format!("{d} {n} rules (was {was})")),
            Some(_) => {}
        }
    }
    for (d, _) in before {
        if !after.iter().any(|(a, _)| a == d) {
            parts.push(format!("-{d}"));
        }
    }
    if parts.is_empty() {
        let all: Vec<String> = after
            .iter()
            .map(|(d, n)| format!("{d} {n} rules"))
            .collect();
        format!("rules edited; {}", all.join(", "))
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
