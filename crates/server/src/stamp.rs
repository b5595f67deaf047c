//! What tells that watched files changed, without reading them: each file's
//! path, presence, length and modification time (following symlinks, so a
//! Kubernetes `..data` swap counts), hashed into one number. The one way
//! sluice notices a rewrite: the rule directory's poll, the TLS files'
//! refresh and the admin token's re-read all compare stamps.

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

/// Something kept from files and read again when their stamp changes. The
/// one watcher task (`config::watch::Watch`, which also owns the rules'
/// reloads) asks each every second; the admin token is read the same way
/// on each request instead, so a revoked token is refused at once.
pub(crate) trait Refresh: Send + Sync {
    /// Reads the files again when their stamp changed since the last read.
    /// Blocking (file I/O): called on a blocking thread.
    fn refresh(&self);
}

#[cfg(test)]
#[path = "stamp_tests.rs"]
mod tests;
