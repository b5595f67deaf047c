//! Config errors: one per problem, each naming the file, the position and the
//! field, and carrying the reference's wording so a search for it finds it.

use std::fmt;
use std::path::PathBuf;

/// One problem in one config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Line and column (1-based), where the parser knew them.
    pub position: Option<(u64, u64)>,
    /// The path to the field, such as `descriptors[0].rate_limit.unit`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        f.write_str(": ")?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Everything wrong with a config directory; a load either succeeds whole or
/// fails with all of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("config directory {0}: {1}")]
    Directory(PathBuf, String),
    #[error("config directory {0} holds no *.yaml or *.yml file")]
    Empty(PathBuf),
    #[error("{}", join(.0))]
    Invalid(Vec<ConfigError>),
}

/// Errors shown in one message; the rest are counted. A directory that
/// yields thousands of errors must not make a megabyte log line or `/readyz`.
pub const SHOWN_ERRORS: usize = 10;
/// Bytes of one error's message shown.
const MESSAGE_BYTES: usize = 512;

fn join(errors: &[ConfigError]) -> String {
    let mut lines: Vec<String> = errors
        .iter()
        .take(SHOWN_ERRORS)
        .map(|e| {
            let mut text = e.to_string();
            if crate::text::cut(&mut text, MESSAGE_BYTES) {
                text.push_str("...");
            }
            text
        })
        .collect();
    if errors.len() > SHOWN_ERRORS {
        lines.push(format!(
            "... and {} more errors",
            errors.len() - SHOWN_ERRORS
        ));
    }
    lines.join("\n")
}
