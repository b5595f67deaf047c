//! How counter keys are written in Redis: sluice's collision-free layout or
//! the reference's, for sharing counters during a migration.

use std::fmt::{self, Write as _};

use sha2::{Digest, Sha256};

use crate::CounterKey;
use crate::hex::push_hex;
use crate::limiter::Algorithm;

/// How counter keys are written in Redis (`--key-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// `<prefix><domain>:<UNIT>:<window start>:<sha256 of domain, unit and
    /// entries>`: collision-free, and no descriptor value appears in clear.
    #[default]
    Sluice,
    /// envoyproxy/ratelimit's `<prefix><domain>_<k1>_<v1>_..._<window start>`,
    /// to share counters with a fleet of the reference during a migration.
    Envoyproxy,
}

/// The key holding a concurrency counter's usage in its current window
/// (the most slots held at once): the counter's key, whose hash tag it
/// shares, and a suffix. One per counter, whatever the window.
pub fn usage_key(counter: &str) -> String {
    format!("{counter}:usage")
}

/// Renders a counter key in `format`. Shapes other than the fixed window
/// always use sluice's layout, with the hash as a hash tag so a sliding
/// window's two keys share a cluster slot (the reference has no such keys to
/// share).
pub fn render_key(
    prefix: &str,
    format: KeyFormat,
    key: &CounterKey,
    algorithm: Algorithm,
    window_start: u64,
    unit: impl fmt::Display,
) -> String {
    let (domain, entries) = key.parts();
    if algorithm != Algorithm::FixedWindow {
        let digest = Sha256::digest(key.as_bytes());
        let mut s = String::with_capacity(prefix.len() + domain.len() + 80);
        s.push_str(prefix);
        s.push_str(domain);
        let _ = write!(s, ":{unit}:{}:{{", algorithm.name());
        push_hex(&mut s, digest.get(..16).unwrap_or_default());
        match algorithm {
            // `v2`: the arrival time with the window's tokens asked. A
            // bucket of an earlier sluice (the arrival time alone) is never
            // read as one, so a rolling upgrade cannot fail on it.
            Algorithm::TokenBucket { .. } => s.push_str("}:v2"),
            _ => {
                let _ = write!(s, "}}:{window_start}");
            }
        }
        return s;
    }
    match format {
        KeyFormat::Sluice => {
            let digest = Sha256::digest(key.as_bytes());
            let mut s = String::with_capacity(prefix.len() + domain.len() + 64);
            s.push_str(prefix);
            s.push_str(domain);
            let _ = write!(s, ":{unit}:{window_start}:");
            push_hex(&mut s, digest.get(..16).unwrap_or_default());
            s
        }
        KeyFormat::Envoyproxy => {
            let mut s = format!("{prefix}{domain}_");
            for (k, v) in entries {
                s.push_str(k);
                s.push('_');
                s.push_str(v);
                s.push('_');
            }
            s.push_str(&window_start.to_string());
            s
        }
    }
}
