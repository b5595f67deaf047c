//! Why sluice could not start or finish a command: what it was doing, then
//! the words of whoever failed (the OS, the TLS library, the store).

use std::fmt::Display;

/// A startup or command failure, ready to print.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AppError(String);

impl AppError {
    pub fn msg(m: impl Display) -> AppError {
        AppError(m.to_string())
    }
}

/// The error and every cause under it, as `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !out.ends_with(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        next = cause.source();
    }
    out
}

macro_rules! from_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for AppError {
            fn from(e: $t) -> AppError {
                AppError(chain(&e))
            }
        }
    )*};
}

from_errors!(
    std::io::Error,
    crate::store::StoreError,
    crate::server::ServeError,
    crate::telemetry::TelemetryError,
    crate::loadgen::BenchError
);

/// Says what was being done when a step failed.
pub(crate) trait Context<T> {
    fn context(self, what: impl Display) -> Result<T, AppError>;
    fn with_context<D: Display>(self, what: impl FnOnce() -> D) -> Result<T, AppError>;
}

impl<T, E: std::error::Error> Context<T> for Result<T, E> {
    fn context(self, what: impl Display) -> Result<T, AppError> {
        self.map_err(|e| AppError(format!("{what}: {}", chain(&e))))
    }

    fn with_context<D: Display>(self, what: impl FnOnce() -> D) -> Result<T, AppError> {
        self.map_err(|e| AppError(format!("{}: {}", what(), chain(&e))))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Display) -> Result<T, AppError> {
        self.ok_or_else(|| AppError(what.to_string()))
    }

    fn with_context<D: Display>(self, what: impl FnOnce() -> D) -> Result<T, AppError> {
        self.ok_or_else(|| AppError(what().to_string()))
    }
}
