//! Optional TLS on the gRPC listener, and mutual TLS when a client CA is given
//! (Envoy presents its client certificate). The watcher task asks every
//! second ([`crate::stamp::Refresh`]); a changed certificate, key or CA is
//! loaded and used for new connections, and a broken one keeps the last good
//! configuration.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpStream;

use crate::conn::{Admitted, ConnBounds, Guarded, IdleBy};
use crate::metrics::Bound;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Where the PEM files are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Require client certificates signed by this CA.
    pub client_ca: Option<PathBuf>,
    /// And carrying this name (DNS name or IP address) among their subject
    /// alternative names (`--grpc-tls-client-san`).
    pub client_san: Option<String>,
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &std::path::Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The live TLS configuration; each new connection takes the current one.
pub struct Tls {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
    /// The files' stamp when last loaded, and whether a failed reload of a
    /// later one was logged (said once, not every second).
    seen: parking_lot::Mutex<(u64, bool)>,
}

impl Tls {
    /// Loads the files now: a bad file fails startup.
    pub fn new(files: TlsFiles) -> Result<Tls, TlsError> {
        let seen = stamp(&files);
        let config = build(&files)?;
        Ok(Tls {
            files,
            config: ArcSwap::from(config),
            seen: parking_lot::Mutex::new((seen, false)),
        })
    }

    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }
}

impl crate::stamp::Refresh for Tls {
    fn refresh(&self) {
        let now = stamp(&self.files);
        let mut seen = self.seen.lock();
        if now == seen.0 {
            return;
        }
        match build(&self.files) {
            Ok(config) => {
                self.config.store(config);
                *seen = (now, false);
                info!(cert = %self.files.cert.display(), "gRPC TLS certificates reloaded");
            }
            // Half-written files are common mid-rotation: retry, log once.
            Err(e) if !seen.1 => {
                seen.1 = true;
                warn!(error = %e, "gRPC TLS reload failed; the previous certificates stay");
            }
            Err(_) => {}
        }
    }
}

/// The files' [stamp](crate::stamp).
fn stamp(f: &TlsFiles) -> u64 {
    let files = [Some(&f.cert), Some(&f.key), f.client_ca.as_ref()];
    crate::stamp::of(files.into_iter().flatten().map(PathBuf::as_path))
}

fn build(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_error(&files.cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(&files.cert, e))?;
    if certs.is_empty() {
        return Err(file_error(&files.cert, "no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file_error(ca, e))? {
                roots
                    .add(cert.map_err(|e| file_error(ca, e))?)
                    .map_err(|e| file_error(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| file_error(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Whether the client's certificate names `san` (always, when none is
/// required). The CA has already verified the certificate itself.
fn san_allowed(conn: &TlsStream<TcpStream>, san: Option<&str>) -> bool {
    let Some(san) = san else {
        return true;
    };
    let Ok(name) = rustls::pki_types::ServerName::try_from(san) else {
        return false;
    };
    conn.get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
        .is_some_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
}

/// A TLS connection under the listener's bounds.
pub(crate) type TlsConn = Guarded<TlsStream<TcpStream>>;

/// Hands on the connections from `admitted` whose handshake succeeded.
/// Handshakes run in their own tasks, so a slow or hostile client holds up
/// nobody; a failed one is logged at debug and dropped (its ticket with it).
/// Stops when the server drops the stream or `token` is cancelled.
pub(crate) fn incoming(
    mut admitted: tokio::sync::mpsc::Receiver<Admitted>,
    tls: Arc<Tls>,
    limits: ConnBounds,
    token: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (stream, ticket) = tokio::select! {
                () = token.cancelled() => return,
                () = tx.closed() => return,
                next = admitted.recv() => match next {
                    Some(a) => a,
                    None => return,
                },
            };
            let acceptor = TlsAcceptor::from(tls.config.load_full());
            let san = tls.files.client_san.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                // The ticket is held through the handshake, so handshakes
                // count against the connection cap too.
                let evicted = ticket.close.clone();
                let handshake = tokio::select! {
                    r = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)) => r,
                    () = evicted.cancelled() => return,
                };
                match handshake {
                    Ok(Ok(conn)) if !san_allowed(&conn, san.as_deref()) => {
                        debug!("gRPC TLS client certificate lacks --grpc-tls-client-san; refused");
                    }
                    Ok(Ok(conn)) => {
                        let _ = tx
                            .send(Ok(Guarded::new(conn, ticket, limits, IdleBy::Requests)))
                            .await;
                    }
                    Ok(Err(e)) => debug!(error = %e, "gRPC TLS handshake failed"),
                    Err(_) => {
                        debug!("gRPC TLS handshake timed out");
                        if ticket.metrics().bound_hit(Bound::Handshake, 1) {
                            warn!(
                                "closed a connection that finished no TLS handshake within --handshake-timeout (logged once per 10 s)"
                            );
                        }
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
