//! Redis clients with TLS certificates of the operator's choosing (a private
//! CA, a client certificate for mutual TLS), and the bb8 manager that pools
//! their multiplexed connections. bb8-redis's own manager can only open a
//! URL, which leaves a `rediss://` server signed by a private CA unreachable
//! without `#insecure`.

use std::path::PathBuf;

use redis::aio::MultiplexedConnection;
use redis::{Client, ClientTlsConfig, RedisError, TlsCertificates};

use super::StoreError;

/// PEM files for TLS to Redis (`--redis-tls-ca`, `--redis-tls-cert`,
/// `--redis-tls-key`), read on every (re)connect so a rotated certificate is
/// picked up by the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// Trust this CA instead of the public roots.
    pub ca: Option<PathBuf>,
    /// A client certificate and key, for mutual TLS.
    pub cert: Option<(PathBuf, PathBuf)>,
}

impl RedisTls {
    /// The certificates as the redis crate takes them.
    pub(super) fn certificates(&self) -> Result<TlsCertificates, StoreError> {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|e| StoreError::Unavailable(format!("{}: {e}", p.display())))
        };
        Ok(TlsCertificates {
            client_tls: match &self.cert {
                Some((cert, key)) => Some(ClientTlsConfig {
                    client_cert: read(cert)?,
                    client_key: read(key)?,
                }),
                None => None,
            },
            root_cert: self.ca.as_ref().map(read).transpose()?,
        })
    }
}

/// A client for `url`, with `tls`'s certificates when given.
pub(super) fn client(url: &str, tls: Option<&RedisTls>) -> Result<Client, StoreError> {
    let unavailable = |e: RedisError| StoreError::Unavailable(e.to_string());
    match tls {
        Some(tls) => Client::build_with_tls(url, tls.certificates()?).map_err(unavailable),
        None => Client::open(url).map_err(unavailable),
    }
}

/// Pools multiplexed connections of one client.
#[derive(Debug, Clone)]
pub(super) struct Manager(pub Client);

impl bb8::ManageConnection for Manager {
    type Connection = MultiplexedConnection;
    type Error = RedisError;

    async fn connect(&self) -> Result<Self::Connection, Self::Error> {
        self.0.get_multiplexed_async_connection().await
    }

    async fn is_valid(&self, conn: &mut Self::Connection) -> Result<(), Self::Error> {
        redis::cmd("PING").query_async::<()>(conn).await
    }

    fn has_broken(&self, _: &mut Self::Connection) -> bool {
        false
    }
}
