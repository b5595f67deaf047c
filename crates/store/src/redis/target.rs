//! Where the Redis counters live (one node, a cluster's seeds, a master
//! behind Sentinel), shown without passwords.

use std::fmt;

use super::Sentinel;

/// Where the counters live.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://[user:pass@]host:port[/db]` or `rediss://...` for TLS.
    Single(String),
    /// Seed nodes of a cluster, each a URL or `host:port`.
    Cluster(Vec<String>),
    /// A master found through Redis Sentinel.
    Sentinel(Sentinel),
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for RedisTarget {
    /// Never shows a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisTarget::Single(url) => f.write_str(&mask(url)),
            RedisTarget::Cluster(seeds) => {
                let masked: Vec<String> = seeds.iter().map(|s| mask(s)).collect();
                write!(f, "cluster {}", masked.join(","))
            }
            RedisTarget::Sentinel(s) => write!(f, "{s}"),
        }
    }
}

/// `redis://user:secret@host` becomes `redis://user:***@host`.
pub fn mask(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((creds, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = creds.split_once(':').map_or("", |(u, _)| u);
    format!("{scheme}://{user}:***@{host}")
}

/// The URLs of a target: cluster seeds given as `host:port` inherit the
/// scheme and credentials of the first seed written as a URL.
pub(super) fn seeds(target: &RedisTarget) -> Vec<String> {
    match target {
        RedisTarget::Single(url) => vec![url.clone()],
        RedisTarget::Sentinel(s) => s.sentinel_urls(),
        RedisTarget::Cluster(seeds) => {
            let base = seeds
                .iter()
                .find_map(|s| {
                    s.split_once("://")
                        .map(|(scheme, rest)| (scheme, rest.rsplit_once('@').map(|(c, _)| c)))
                })
                .unwrap_or(("redis", None));
            seeds
                .iter()
                .map(|s| {
                    if s.contains("://") {
                        s.clone()
                    } else {
                        match base.1 {
                            Some(creds) => format!("{}://{creds}@{s}", base.0),
                            None => format!("{}://{s}", base.0),
                        }
                    }
                })
                .collect()
        }
    }
}
