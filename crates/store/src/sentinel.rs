//! Redis Sentinel: which node is the master now. sluice asks the sentinels
//! when it (re)connects, so following a failover needs nothing new: the old
//! master stops counting (refused or read-only), the breaker opens and the
//! failure policy covers the gap, and the recovery probe asks the sentinels
//! again and proves the new master with a real increment before any request
//! goes to it.

use std::fmt;
use std::time::Duration;

use super::StoreError;
use super::pool::{self, RedisTls};

/// `--redis-sentinel MASTER@HOST:PORT[,HOST:PORT...]`. Sentinels may be
/// written as URLs (`rediss://user:pass@host:port`): the first URL's scheme
/// and credentials are those of the master; the sentinels themselves are
/// asked with the same scheme and `--redis-sentinel-password`, if any.
#[derive(Clone, PartialEq, Eq)]
pub struct Sentinel {
    pub master: String,
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    pub scheme: String,
    /// `user:pass` for the master.
    pub credentials: Option<String>,
    /// AUTH for the sentinels (the reference's `REDIS_SENTINEL_AUTH`).
    pub password: Option<String>,
}

impl fmt::Display for Sentinel {
    /// Never shows a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sentinel {}@{}", self.master, self.sentinels.join(","))
    }
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl Sentinel {
    /// Parses `MASTER@HOST:PORT[,HOST:PORT...]`.
    pub fn parse(spec: &str, password: Option<String>) -> Result<Sentinel, String> {
        let (master, rest) = spec
            .split_once('@')
            .filter(|(m, r)| !m.is_empty() && !r.is_empty())
            .ok_or_else(|| "expected MASTER@HOST:PORT[,HOST:PORT...]".to_owned())?;
        let mut scheme = "redis".to_owned();
        let mut credentials = None;
        let mut sentinels = Vec::new();
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let hostport = match item.split_once("://") {
                Some((s, r)) => {
                    scheme = s.to_owned();
                    match r.rsplit_once('@') {
                        Some((c, h)) => {
                            credentials = Some(c.to_owned());
                            h
                        }
                        None => r,
                    }
                }
                None => item,
            };
            sentinels.push(hostport.trim_end_matches('/').to_owned());
        }
        if sentinels.is_empty() {
            return Err("no sentinel address".into());
        }
        Ok(Sentinel {
            master: master.to_owned(),
            sentinels,
            scheme,
            credentials,
            password,
        })
    }

    /// The URL of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|h| match &self.password {
                Some(p) => format!("{}://:{p}@{h}", self.scheme),
                None => format!("{}://{h}", self.scheme),
            })
            .collect()
    }

    /// The master's URL as the sentinels know it now: the first sentinel
    /// that answers wins.
    pub async fn master_url(
        &self,
        timeout: Duration,
        tls: Option<&RedisTls>,
    ) -> Result<String, StoreError> {
        let mut last = String::from("no sentinel answered");
        for url in self.sentinel_urls() {
            match tokio::time::timeout(timeout, self.ask(&url, tls)).await {
                Ok(Ok(Some((host, port)))) => {
                    let creds = self
                        .credentials
                        .as_ref()
                        .map_or(String::new(), |c| format!("{c}@"));
                    return Ok(format!("{}://{creds}{host}:{port}", self.scheme));
                }
                Ok(Ok(None)) => last = format!("sentinels do not know master '{}'", self.master),
                Ok(Err(e)) => last = format!("sentinel: {e}"),
                Err(_) => last = "sentinel: no answer in time".into(),
            }
        }
        Err(StoreError::Unavailable(last))
    }

    async fn ask(
        &self,
        url: &str,
        tls: Option<&RedisTls>,
    ) -> Result<Option<(String, u16)>, StoreError> {
        let client = pool::client(url, tls)?;
        let failed = |e: redis::RedisError| StoreError::Unavailable(e.to_string());
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(failed)?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async(&mut conn)
            .await
            .map_err(failed)
    }
}

#[cfg(test)]
#[path = "sentinel_tests.rs"]
mod tests;
