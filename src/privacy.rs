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
mod tests {
    use super::*;

    #[test]
    fn normalises_case_space_and_plus_tags() {
        assert_eq!(normalise_email("  A+1@Example.COM "), "a@example.com");
        assert_eq!(normalise_email("a+2@example.com"), "a@example.com");
        assert_eq!(normalise_email("a@example.com"), "a@example.com");
        assert_eq!(normalise_email("+x@example.com"), "@example.com");
        assert_eq!(normalise_email("no-at-sign"), "no-at-sign");
        // The plus belongs to the local part only.
        assert_eq!(normalise_email("a@ex+ample.com"), "a@ex+ample.com");
    }

    #[test]
    fn variants_share_one_hash_and_no_address_survives() {
        let p = Privacy::default();
        let h = p.protect("A+1@Example.com");
        assert_eq!(h, p.protect("a+2@example.com"));
        assert_ne!(h, p.protect("b@example.com"));
        assert_eq!(h.len(), 32);
        assert!(!h.contains('@') && !h.contains("example"));
        assert_eq!(p.protect("  "), "");
    }

    #[test]
    fn a_secret_changes_the_hash() {
        let plain = Privacy::default().protect("a@example.com");
        let keyed = Privacy::new(vec!["email".into()], Some(b"s3cret".to_vec()));
        let other = Privacy::new(vec!["email".into()], Some(b"other".to_vec()));
        assert_ne!(plain, keyed.protect("a@example.com"));
        assert_ne!(
            keyed.protect("a@example.com"),
            other.protect("a@example.com")
        );
        assert!(format!("{keyed:?}").contains("keyed: true"));
        assert!(!format!("{keyed:?}").contains("s3cret"));
    }

    #[test]
    fn only_configured_keys_are_email_keys() {
        let p = Privacy::new(vec!["email".into(), "mailbox".into()], None);
        assert!(p.is_email_key("mailbox"));
        assert!(!p.is_email_key("remote_address"));
    }
}
