//! Finding the rule files under a directory: each real directory is visited
//! once (symlink loops and diamonds cost nothing extra), the walk is bounded
//! in depth and in files, and a symlinked rule file whose target is gone is an
//! error rather than a domain that silently disappears.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{ConfigError, LoadError};

/// How deep the loader follows directories.
const MAX_DEPTH: usize = 16;

/// What a walk found.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Rule files, sorted.
    pub files: Vec<PathBuf>,
    /// Rule files that could not be used (dangling symlinks).
    pub errors: Vec<ConfigError>,
}

struct Walk {
    seen: HashSet<PathBuf>,
    found: Found,
    max_files: usize,
    root: PathBuf,
}

/// Every `*.yaml`/`*.yml` file under `dir`, skipping dot-files and
/// dot-directories (Kubernetes' `..data`), following symlinks (ConfigMap
/// files are links into `..data`) but entering each real directory once.
pub(super) fn find(dir: &Path, max_files: usize) -> Result<Found, LoadError> {
    let mut walk = Walk {
        seen: HashSet::new(),
        found: Found::default(),
        max_files,
        root: dir.to_path_buf(),
    };
    walk.dir(dir, 0)?;
    walk.found.files.sort();
    Ok(walk.found)
}

impl Walk {
    fn dir(&mut self, dir: &Path, depth: usize) -> Result<(), LoadError> {
        let unreadable = |e: std::io::Error| LoadError::Directory(dir.to_path_buf(), e.to_string());
        // The real directory: a loop (`ln -s . a`) or a second link to one
        // already walked leads here again and stops.
        let real = std::fs::canonicalize(dir).map_err(unreadable)?;
        if !self.seen.insert(real) {
            return Ok(());
        }
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let path = entry.map_err(unreadable)?.path();
            let hidden = path
                .file_name()
                .is_none_or(|n| n.to_string_lossy().starts_with('.'));
            if hidden {
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() && depth < MAX_DEPTH => self.dir(&path, depth + 1)?,
                Ok(meta) if meta.is_file() && is_yaml(&path) => self.file(path)?,
                Ok(_) => {}
                Err(e) if is_yaml(&path) => self.found.errors.push(ConfigError {
                    file: path,
                    position: None,
                    field: String::new(),
                    message: format!(
                        "cannot read the rule file ({e}); a dangling symlink? The last good rules stay in force"
                    ),
                }),
                Err(_) => {}
            }
        }
        Ok(())
    }

    fn file(&mut self, path: PathBuf) -> Result<(), LoadError> {
        if self.found.files.len() >= self.max_files {
            return Err(LoadError::Directory(
                self.root.clone(),
                format!("more than {} rule files (--max-rule-files)", self.max_files),
            ));
        }
        self.found.files.push(path);
        Ok(())
    }
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// A cheap fingerprint of the directory from file metadata alone (paths, sizes,
/// modification times, following symlinks), for polling between events.
pub fn stat_fingerprint(dir: &Path, max_files: usize) -> u64 {
    let Ok(found) = find(dir, max_files) else {
        return 0;
    };
    let files = found
        .files
        .iter()
        .chain(found.errors.iter().map(|e| &e.file));
    crate::stamp::of(files.map(PathBuf::as_path))
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
