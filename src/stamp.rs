//! What tells that watched files changed, without reading them: each file's
//! path, presence, length and modification time (following symlinks, so a
//! Kubernetes `..data` swap counts), hashed into one number. The one way
//! sluice notices a rewrite: the rule directory's poll, the TLS files'
//! watch and the admin token's re-read all compare stamps.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

/// The stamp of `files`, in order: equal stamps mean nothing sluice can see
/// from metadata changed. It stats each file (blocking file I/O: call it off
/// the runtime's workers).
pub(crate) fn of<'a>(files: impl IntoIterator<Item = &'a Path>) -> u64 {
    let mut hasher = DefaultHasher::new();
    for f in files {
        f.hash(&mut hasher);
        match std::fs::metadata(f) {
            Ok(m) => {
                true.hash(&mut hasher);
                m.len().hash(&mut hasher);
                m.modified().ok().hash(&mut hasher);
            }
            Err(_) => false.hash(&mut hasher),
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
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
}
