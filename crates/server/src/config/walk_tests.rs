use super::*;

#[cfg(unix)]
#[test]
fn symlink_loops_are_walked_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "domain: a\n").unwrap();
    for name in ["l1", "l2", "l3", "l4"] {
        std::os::unix::fs::symlink(".", dir.path().join(name)).unwrap();
    }
    let started = std::time::Instant::now();
    let found = find(dir.path(), 1000).unwrap();
    assert_eq!(found.files.len(), 1, "{:?}", found.files);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[cfg(unix)]
#[test]
fn a_dangling_rule_link_is_an_error_and_files_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "domain: a\n").unwrap();
    std::os::unix::fs::symlink("gone.yaml", dir.path().join("b.yaml")).unwrap();
    let found = find(dir.path(), 1000).unwrap();
    assert_eq!(found.files.len(), 1);
    assert_eq!(found.errors.len(), 1);
    assert!(found.errors[0].to_string().contains("b.yaml"));
    std::fs::write(dir.path().join("c.yaml"), "domain: c\n").unwrap();
    let e = find(dir.path(), 1).unwrap_err();
    assert!(e.to_string().contains("--max-rule-files"), "{e}");
}
