//! memcached's text protocol on one connection: the commands the store
//! counts with (`incr`, `decr`, `add`, `cas`, `gets`), each reply read
//! whole or the connection retired, and the pool's connection manager.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use super::unavailable;
use crate::calls::Calls;
use crate::{Increment, StoreError};

/// Bytes of a reply line we read at most; memcached's are far shorter.
const MAX_LINE: u64 = 512;

/// One connection. `pending` is set from a command's first byte until its
/// whole reply is read: a call cut short (the store timeout drops it, a
/// reply that does not parse) leaves bytes in flight, and such a connection
/// must never serve another request, which would read the old reply as its
/// own count.
pub(super) struct Conn {
    /// Taken only when the connection is dropped with a call out.
    io: Option<BufStream<TcpStream>>,
    pending: bool,
    calls: Arc<Calls>,
    /// The stamp of the call sent and not yet answered (0: none).
    sent: u64,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.sent == 0 {
            return;
        }
        self.calls.abandoned(self.sent);
        // Nobody else reads this call's answer: listen for it, so a store
        // answering only callers that have left is heard, not silent.
        if let (Some(io), Some(listening), Ok(rt)) = (
            self.io.take(),
            self.calls.listen(),
            tokio::runtime::Handle::try_current(),
        ) {
            rt.spawn(listen(io, listening));
        }
    }
}

/// How long the answer to a call given up on is listened for: as long as
/// the store may be silent before its waits are its own fault.
const LISTEN_FOR: Duration = crate::resilient::SILENCE_BOUND;

/// Waits for the first byte of a given-up call's answer (one buffered
/// before the caller left counts), then closes the connection.
async fn listen(mut io: BufStream<TcpStream>, listening: crate::calls::Listening) {
    let mut byte = [0u8; 1];
    if let Ok(Ok(1..)) = tokio::time::timeout(LISTEN_FOR, io.read(&mut byte)).await {
        listening.heard();
    }
}

/// What `gets` found.
pub(super) struct Found {
    pub(super) value: u64,
    pub(super) cas: u64,
}

impl Conn {
    fn io(&mut self) -> Result<&mut BufStream<TcpStream>, StoreError> {
        self.io
            .as_mut()
            .ok_or_else(|| unavailable("memcached connection retired"))
    }

    /// Writes a command and reads the first line of its reply; the caller
    /// clears `pending` once it has read the rest.
    pub(super) async fn send(&mut self, cmd: &str) -> Result<String, StoreError> {
        self.pending = true;
        if self.sent == 0 {
            self.sent = self.calls.sent();
        }
        let io = self.io()?;
        io.write_all(cmd.as_bytes()).await.map_err(unavailable)?;
        io.flush().await.map_err(unavailable)?;
        self.line().await
    }

    pub(super) async fn line(&mut self) -> Result<String, StoreError> {
        let mut line = String::new();
        let n = self
            .io()?
            .take(MAX_LINE)
            .read_line(&mut line)
            .await
            .map_err(unavailable)?;
        if n == 0 {
            return Err(unavailable("memcached closed the connection"));
        }
        if self.sent != 0 {
            self.sent = 0;
            self.calls.answered();
        }
        if !line.ends_with("\r\n") {
            return Err(StoreError::BadReply(format!("reply line {line:.40}")));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    /// The count after `incr`, or `None` when the key is missing.
    pub(super) async fn incr(&mut self, key: &str, by: u64) -> Result<Option<u64>, StoreError> {
        self.arithmetic("incr", key, by).await
    }

    /// The count after `decr` (memcached floors it at 0), or `None` when the
    /// key is missing: a refund never makes a counter.
    pub(super) async fn decr(&mut self, key: &str, by: u64) -> Result<Option<u64>, StoreError> {
        self.arithmetic("decr", key, by).await
    }

    /// `incr` or `decr` (`verb`): the count after, or `None` when missing.
    async fn arithmetic(
        &mut self,
        verb: &str,
        key: &str,
        by: u64,
    ) -> Result<Option<u64>, StoreError> {
        let reply = self.send(&format!("{verb} {key} {by}\r\n")).await?;
        self.pending = false;
        match reply.as_str() {
            "NOT_FOUND" => Ok(None),
            r if r.starts_with("CLIENT_ERROR") => Err(StoreError::Rejected(r.to_owned())),
            r => r
                .parse()
                .map(Some)
                .map_err(|_| StoreError::BadReply(format!("{verb} answered {r:.40}"))),
        }
    }

    /// This window's counter after adding `hits`, or after giving them back.
    pub(super) async fn window_count(
        &mut self,
        key: &str,
        inc: &Increment,
        ttl: u64,
    ) -> Result<u64, StoreError> {
        if inc.refund {
            Ok(self.decr(key, inc.hits).await?.unwrap_or(0))
        } else {
            self.add_hits(key, inc.hits, ttl).await
        }
    }

    /// `add` (`cas` = None) or `cas`: whether it was stored.
    pub(super) async fn store(
        &mut self,
        key: &str,
        value: u64,
        ttl: u64,
        cas: Option<u64>,
    ) -> Result<bool, StoreError> {
        let data = value.to_string();
        let cmd = match cas {
            None => format!("add {key} 0 {ttl} {}\r\n{data}\r\n", data.len()),
            Some(c) => format!("cas {key} 0 {ttl} {} {c}\r\n{data}\r\n", data.len()),
        };
        let reply = self.send(&cmd).await?;
        self.pending = false;
        match reply.as_str() {
            "STORED" => Ok(true),
            "NOT_STORED" | "EXISTS" | "NOT_FOUND" => Ok(false),
            r => Err(StoreError::BadReply(format!("store answered {r:.40}"))),
        }
    }

    /// Deletes `key` (an operator's reset); a key not there is no error.
    pub(super) async fn delete(&mut self, key: &str) -> Result<(), StoreError> {
        let reply = self.send(&format!("delete {key}\r\n")).await?;
        self.pending = false;
        match reply.as_str() {
            "DELETED" | "NOT_FOUND" => Ok(()),
            r => Err(StoreError::BadReply(format!("delete answered {r:.40}"))),
        }
    }

    pub(super) async fn gets(&mut self, key: &str) -> Result<Option<Found>, StoreError> {
        let head = self.send(&format!("gets {key}\r\n")).await?;
        if head == "END" {
            self.pending = false;
            return Ok(None);
        }
        let bad = || StoreError::BadReply(format!("gets answered {head:.60}"));
        let parts: Vec<&str> = head.split(' ').collect();
        let (len, cas) = match parts.as_slice() {
            ["VALUE", _, _, len, cas] => (
                len.parse::<u64>().map_err(|_| bad())?,
                cas.parse::<u64>().map_err(|_| bad())?,
            ),
            _ => return Err(bad()),
        };
        if len > 32 {
            return Err(StoreError::Rejected(format!("{key} holds {len} bytes")));
        }
        let data = self.line().await?;
        if self.line().await? != "END" {
            return Err(bad());
        }
        self.pending = false;
        let value = data
            .parse()
            .map_err(|_| StoreError::Rejected(format!("{key} holds no number")))?;
        Ok(Some(Found { value, cas }))
    }

    /// Adds `hits` to a window counter, creating it if needed: the count after.
    pub(super) async fn add_hits(
        &mut self,
        key: &str,
        hits: u64,
        ttl: u64,
    ) -> Result<u64, StoreError> {
        for _ in 0..3 {
            if let Some(n) = self.incr(key, hits).await? {
                return Ok(n);
            }
            if self.store(key, hits, ttl, None).await? {
                return Ok(hits);
            }
            // Another instance created it in between: count on top of it.
        }
        Err(StoreError::Unavailable(format!("{key} keeps vanishing")))
    }
}

/// Opens connections to one server.
pub(super) struct Manager {
    pub(super) addr: String,
    pub(super) timeout: Duration,
    pub(super) calls: Arc<Calls>,
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = io::Error;

    async fn connect(&self) -> Result<Conn, io::Error> {
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            io: Some(BufStream::new(stream)),
            pending: false,
            calls: self.calls.clone(),
            sent: 0,
        })
    }

    async fn is_valid(&self, _: &mut Conn) -> Result<(), io::Error> {
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.pending
    }
}
