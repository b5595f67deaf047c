//! Redis clients with TLS certificates of the operator's choosing (a private
//! CA, a client certificate for mutual TLS), and the bb8 manager that pools
//! their multiplexed connections. bb8-redis's own manager can only open a
//! URL, which leaves a `rediss://` server signed by a private CA unreachable
//! without `#insecure`.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// A Redis error as a store error: a reply that cannot be read is a bad
/// reply; everything else means the store cannot count right now.
pub(super) fn classify(e: &redis::RedisError) -> StoreError {
    match e.kind() {
        redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse => {
            StoreError::BadReply(e.to_string())
        }
        _ => StoreError::Unavailable(e.to_string()),
    }
}

/// A pool that reports why it has no connection. bb8 makes connections in
/// the background and a waiting checkout only ever sees "Timed out in bb8",
/// which hid Redis's own words (a refused port, a protected-mode `DENIED`, a
/// TLS or DNS failure). The pool's error sink keeps the last connect error
/// for [`checkout_error`] to tell; no retries inside bb8, since the store's
/// breaker and prober do the retrying.
pub(super) fn builder<M>(size: u32, timeout: Duration, last: &LastError) -> bb8::Builder<M>
where
    M: bb8::ManageConnection,
    M::Error: Display,
{
    bb8::Pool::builder()
        .max_size(size.max(1))
        .connection_timeout(timeout)
        .retry_connection(false)
        .error_sink(Box::new(last.clone()))
        // A PING per checkout would double every request's round trips.
        .test_on_check_out(false)
}

/// The last error a pool's connects met, in the failing party's words,
/// and when.
#[derive(Debug, Clone, Default)]
pub(super) struct LastError(Arc<Mutex<Option<(Instant, String)>>>);

impl LastError {
    /// A checkout's failure: the server's or the connect's own error, or
    /// the error a connect met while the checkout waited (`waited`).
    /// Without one, the checkout waited its time out for a connection
    /// others held, or for connects still under way: a wait that ran out
    /// ([`StoreError::Timeout`]), whose blame the safety net decides as
    /// for any other (a process starved past the connect timeout polls
    /// the checkout's own timer before the request's).
    pub(super) fn checkout<E: Display>(&self, e: bb8::RunError<E>, waited: Duration) -> StoreError {
        match e {
            bb8::RunError::User(e) => StoreError::Unavailable(e.to_string()),
            bb8::RunError::TimedOut => match self.within(waited) {
                Some(why) => StoreError::Unavailable(why),
                None => StoreError::Timeout,
            },
        }
    }

    /// The last connect error, if it came within `waited` of now.
    fn within(&self, waited: Duration) -> Option<String> {
        let g = self.0.lock().ok()?;
        let (at, why) = g.as_ref()?;
        (at.elapsed() <= waited).then(|| why.clone())
    }
}

impl<E: Display> bb8::ErrorSink<E> for LastError {
    fn sink(&self, error: E) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some((Instant::now(), error.to_string()));
        }
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<E>> {
        Box::new(self.clone())
    }
}

/// A bb8 pool of connections to one server and the last error its connects
/// met.
#[derive(Debug)]
pub(super) struct Pooled<M: bb8::ManageConnection> {
    pool: bb8::Pool<M>,
    last: LastError,
    /// How long a checkout waits.
    timeout: Duration,
}

impl<M: bb8::ManageConnection> Clone for Pooled<M> {
    fn clone(&self) -> Self {
        Pooled {
            pool: self.pool.clone(),
            last: self.last.clone(),
            timeout: self.timeout,
        }
    }
}

impl<M> Pooled<M>
where
    M: bb8::ManageConnection,
    M::Error: Display,
{
    /// A pool of `manager`'s connections, one of them opened now so that a
    /// server that cannot be reached says why at once, in its own words.
    pub(super) async fn open(manager: M, size: u32, timeout: Duration) -> Result<Self, StoreError> {
        let first = tokio::time::timeout(timeout, manager.connect())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!("no connection within {}ms", timeout.as_millis()))
            })?
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let last = LastError::default();
        let pool = builder(size, timeout, &last).build_unchecked(manager);
        // Just built with room for it: this cannot be refused.
        let _ = pool.add(first);
        Ok(Pooled {
            pool,
            last,
            timeout,
        })
    }

    /// A connection, or why there is none.
    pub(super) async fn get(&self) -> Result<bb8::PooledConnection<'_, M>, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| self.last.checkout(e, self.timeout))
    }
}

/// Pools multiplexed connections of one client.
#[derive(Debug, Clone)]
pub(super) struct Manager(pub(super) Client);

/// Why a connection could not be made, in the failing party's words.
#[derive(Debug)]
pub(super) struct ConnectError(String);

impl Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = MultiplexedConnection;
    type Error = ConnectError;

    async fn connect(&self) -> Result<Self::Connection, Self::Error> {
        let attempt = async {
            let mut conn = self.0.get_multiplexed_async_connection().await?;
            // A server that refuses us after accepting (protected mode's
            // `DENIED`, a full `maxclients`) says so on the first reply.
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            Ok::<_, RedisError>(conn)
        };
        match attempt.await {
            Ok(conn) => Ok(conn),
            Err(e) if e.is_io_error() => match self.greeting().await {
                Some(said) => Err(ConnectError(said)),
                None => Err(ConnectError(e.to_string())),
            },
            Err(e) => Err(ConnectError(e.to_string())),
        }
    }

    async fn is_valid(&self, conn: &mut Self::Connection) -> Result<(), Self::Error> {
        redis::cmd("PING")
            .query_async::<()>(conn)
            .await
            .map_err(|e| ConnectError(e.to_string()))
    }

    fn has_broken(&self, _: &mut Self::Connection) -> bool {
        false
    }
}

impl Manager {
    /// What a plain-TCP server that hung up on us said before it did: Redis
    /// writes its refusal (`-DENIED Redis is running in protected mode...`)
    /// as soon as it accepts and closes, before any command is read, so the
    /// client only sees a broken pipe. Only an error line counts.
    async fn greeting(&self) -> Option<String> {
        let redis::ConnectionAddr::Tcp(host, port) = self.0.get_connection_info().addr() else {
            return None;
        };
        let read = async {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .ok()?;
            let mut said = Vec::new();
            // Until the server hangs up: Redis closes right after refusing.
            let _ = tokio::io::AsyncReadExt::read_to_end(
                &mut tokio::io::AsyncReadExt::take(stream, 2048),
                &mut said,
            )
            .await;
            let text = String::from_utf8_lossy(&said).into_owned();
            let line = text.strip_prefix('-')?.lines().next()?.trim().to_owned();
            Some(line)
        };
        tokio::time::timeout(Duration::from_millis(500), read)
            .await
            .ok()
            .flatten()
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
