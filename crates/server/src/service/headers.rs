//! Rate-limit response headers that sluice adds itself
//! (`--response-headers`), describing every limit that applied, on OK and
//! OVER_LIMIT answers alike:
//! - `draft03`: `X-RateLimit-Limit`, `-Remaining`, `-Reset`, in the format of
//!   Envoy's `enable_x_ratelimit_headers: DRAFT_VERSION_03` and the
//!   reference's `LIMIT_RESPONSE_HEADERS_ENABLED`, but with each limit's real
//!   window (a `window: 90s` rule says `w=90`, which Envoy cannot know);
//! - `ietf`: the IETF httpapi draft's `RateLimit-Policy` and `RateLimit`
//!   structured fields, one item per limit.

use std::fmt::Write as _;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;

/// Which headers sluice adds (`--response-headers`; the command line's
/// names for it are its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseHeaders {
    /// None: Envoy's own `enable_x_ratelimit_headers` builds them from the statuses.
    #[default]
    None,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` (draft 03).
    Draft03,
    /// `RateLimit-Policy` and `RateLimit` (IETF httpapi draft).
    Ietf,
}

/// One limit as the headers describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shown {
    /// The rule's `name`, or its path.
    pub name: String,
    pub limit: u32,
    pub window_seconds: u64,
    pub remaining: u32,
    pub reset_seconds: u64,
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.into(),
        value,
        raw_value: Vec::new(),
    }
}

/// A structured-field string: quotes and backslashes escaped, anything
/// outside printable ASCII dropped (rule names are config, not client data).
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The headers for `limits` (nothing when there are none or `kind` is none).
pub(super) fn build(kind: ResponseHeaders, limits: &[Shown]) -> Vec<HeaderValue> {
    // The limit closest to exhaustion leads, as Envoy and the reference do.
    let Some(first) = limits.iter().min_by_key(|l| l.remaining) else {
        return Vec::new();
    };
    match kind {
        ResponseHeaders::None => Vec::new(),
        ResponseHeaders::Draft03 => {
            let mut limit = first.limit.to_string();
            for l in limits {
                let _ = write!(limit, ", {};w={}", l.limit, l.window_seconds);
                if !l.name.is_empty() {
                    let _ = write!(limit, ";name={}", sf_string(&l.name));
                }
            }
            vec![
                header("X-RateLimit-Limit", limit),
                header("X-RateLimit-Remaining", first.remaining.to_string()),
                header("X-RateLimit-Reset", first.reset_seconds.to_string()),
            ]
        }
        ResponseHeaders::Ietf => {
            let policy: Vec<String> = limits
                .iter()
                .map(|l| {
                    format!(
                        "{};q={};w={}",
                        sf_string(&l.name),
                        l.limit,
                        l.window_seconds
                    )
                })
                .collect();
            let state: Vec<String> = limits
                .iter()
                .map(|l| {
                    format!(
                        "{};r={};t={}",
                        sf_string(&l.name),
                        l.remaining,
                        l.reset_seconds
                    )
                })
                .collect();
            vec![
                header("RateLimit-Policy", policy.join(", ")),
                header("RateLimit", state.join(", ")),
            ]
        }
    }
}

#[cfg(test)]
#[path = "headers_tests.rs"]
mod tests;
