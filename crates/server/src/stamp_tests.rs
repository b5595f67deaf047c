use std::time::{Duration, SystemTime};

use super::*;

#[test]
fn a_rewrite_of_the_same_length_a_removal_and_a_return_each_change_the_stamp() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, "one").unwrap();
    std::fs::write(&b, "two").unwrap();
    let files = || [a.as_path(), b.as_path()];
    let first = of(files());
    assert_eq!(of(files()), first, "nothing changed");
    let later = SystemTime::now() + Duration::from_secs(5);
    std::fs::write(&b, "TWO").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&b)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let rewritten = of(files());
    assert_ne!(rewritten, first, "same length, later time");
    std::fs::remove_file(&b).unwrap();
    let removed = of(files());
    assert_ne!(removed, rewritten, "gone");
    std::fs::write(&b, "").unwrap();
    assert_ne!(of(files()), removed, "back, empty");
}
