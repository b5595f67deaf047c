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

fn join(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
