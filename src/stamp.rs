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
#[path = "stamp_tests.rs"]
mod tests;
