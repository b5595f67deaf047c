//! Who may look counters up, reset them and read the top in clear: a caller
//! bearing the token of `--admin-token-file` (`Authorization: Bearer`), read
//! again whenever the file changes, so a mounted secret can be rotated; with
//! no token configured, loopback peers only. The token is never logged: a
//! caller is named by the token's id, the first 8 hex digits of its SHA-256.

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// Bytes of a token file read at most.
const MAX_TOKEN_BYTES: u64 = 4096;

/// Who was let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Caller {
    /// Bore the token with this id.
    Token(String),
    /// No token is configured, and the peer is on loopback.
    Loopback,
}

impl Caller {
    /// How the log names the caller.
    pub(crate) fn id(&self) -> &str {
        match self {
            Caller::Token(id) => id,
            Caller::Loopback => "loopback",
        }
    }
}

/// The token file as last read: its [stamp](crate::stamp) (what tells a
/// rewrite) and the token in it.
#[derive(Debug, Default)]
struct Read {
    seen: Option<u64>,
    token: Option<String>,
}

/// The admin token, from `--admin-token-file`.
#[derive(Debug, Default)]
pub(crate) struct AdminToken {
    path: Option<PathBuf>,
    read: Mutex<Read>,
}

impl AdminToken {
    pub(crate) fn new(path: Option<PathBuf>) -> AdminToken {
        AdminToken {
            path,
            read: Mutex::default(),
        }
    }

    /// The caller, or why it is refused (said in the 401's body). The
    /// file is looked at on a blocking thread, never on a worker that
    /// answers requests.
    pub(crate) async fn authorise(
        &self,
        bearer: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Result<Caller, String> {
        let Some(path) = &self.path else {
            return match peer.map(|p| p.ip()) {
                Some(ip) if loopback(ip) => Ok(Caller::Loopback),
                _ => Err(
                    "no --admin-token-file is configured: counters answer loopback peers only"
                        .into(),
                ),
            };
        };
        let token = self.current(path).await?;
        let Some(given) = bearer else {
            return Err("missing Authorization: Bearer <token>".into());
        };
        if equal(given.as_bytes(), token.as_bytes()) {
            Ok(Caller::Token(token_id(&token)))
        } else {
            Err("wrong token".into())
        }
    }

    /// The token in the file, read again when the file changed.
    async fn current(&self, path: &Path) -> Result<String, String> {
        let seen = self.read.lock().seen;
        let file = path.to_path_buf();
        let fresh = tokio::task::spawn_blocking(move || read_if_changed(&file, seen))
            .await
            .map_err(|e| format!("--admin-token-file {}: {e}", path.display()))??;
        let mut read = self.read.lock();
        if let Some((stamp, token)) = fresh {
            read.seen = Some(stamp);
            read.token = token;
        }
        read.token
            .clone()
            .ok_or_else(|| format!("--admin-token-file {} is empty", path.display()))
    }
}

/// The token file's stamp and token when its stamp is not `seen`.
type Fresh = Option<(u64, Option<String>)>;

fn read_if_changed(path: &Path, seen: Option<u64>) -> Result<Fresh, String> {
    let stamp = crate::stamp::of([path]);
    if seen == Some(stamp) {
        return Ok(None);
    }
    // One bounded read, so a file that grows while it is read still costs
    // at most the bound (and no second stat for its length).
    let failed = |e: std::io::Error| format!("--admin-token-file {}: {e}", path.display());
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_BYTES + 1).read_to_string(&mut text))
        .map_err(failed)?;
    if text.len() as u64 > MAX_TOKEN_BYTES {
        return Err(format!(
            "--admin-token-file {} is over {MAX_TOKEN_BYTES} bytes",
            path.display()
        ));
    }
    let token = text.trim().to_owned();
    Ok(Some((stamp, (!token.is_empty()).then_some(token))))
}

fn loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Compares in time that depends on the lengths only.
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A token's id for logs: the first 8 hex digits of its SHA-256.
pub(crate) fn token_id(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut out = String::with_capacity(8);
    crate::hex::push_hex(&mut out, digest.get(..4).unwrap_or_default());
    out
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
