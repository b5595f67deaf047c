//! Personal data at the edge: descriptor values whose key names an email
//! address are normalised and hashed as the request is accepted, so that no
//! address reaches a counter key, a metric label, a log line or `/json`.
//!
//! Normalising first makes `A+1@Example.com` and `a+2@example.com` one
//! mailbox, as the mail provider delivers them to one inbox.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::hex::push_hex;

/// Which descriptor keys carry email addresses, and how their values are
/// hashed.
#[derive(Clone)]
pub struct Privacy {
    email_keys: Vec<String>,
    /// HMAC keyed once with the secret; each value hashes a clone of it.
    mac: Option<Hmac<Sha256>>,
}

impl std::fmt::Debug for Privacy {
    // The secret never appears in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Privacy")
            .field("email_keys", &self.email_keys)
            .field("keyed", &self.mac.is_some())
            .finish()
    }
}

impl Default for Privacy {
    /// Entries keyed `email`, hashed with plain SHA-256.
    fn default() -> Self {
        Privacy::new(vec!["email".to_owned()], None)
    }
}

impl Privacy {
    /// `secret` switches SHA-256 to HMAC-SHA-256, so that a leaked key cannot
    /// be matched against a list of known addresses.
    pub fn new(email_keys: Vec<String>, secret: Option<Vec<u8>>) -> Self {
        Privacy {
            email_keys,
            // HMAC takes keys of any length, so only an empty secret is none.
            mac: secret
                .filter(|s| !s.is_empty())
                .and_then(|s| <Hmac<Sha256> as KeyInit>::new_from_slice(&s).ok()),
        }
    }

    /// Whether a descriptor key names an email address.
    pub fn is_email_key(&self, key: &str) -> bool {
        self.email_keys.iter().any(|k| k == key)
    }

    /// The value to count under for an email entry: the hex digest (128 bits)
    /// of the normalised address. An empty value stays empty, so that it is
    /// still visibly "no address".
    pub fn protect(&self, value: &str) -> String {
        let normal = normalise_email(value);
        if normal.is_empty() {
            return normal;
        }
        let digest: [u8; 32] = match &self.mac {
            Some(mac) => {
                let mut mac = mac.clone();
                mac.update(normal.as_bytes());
                mac.finalize().into_bytes().into()
            }
            None => Sha256::digest(normal.as_bytes()).into(),
        };
        let mut out = String::with_capacity(32);
        push_hex(&mut out, digest.get(..16).unwrap_or_default());
        out
    }
}

/// Trimmed, lowercased, and without a `+tag` in the local part. A value
/// without `@` is only trimmed and lowercased.
pub fn normalise_email(value: &str) -> String {
    let lower = value.trim().to_lowercase();
    match lower.rsplit_once('@') {
        Some((local, domain)) => {
            let local = local.split_once('+').map_or(local, |(l, _)| l);
            format!("{local}@{domain}")
        }
        None => lower,
    }
}

#[cfg(test)]
#[path = "privacy_tests.rs"]
mod tests;
