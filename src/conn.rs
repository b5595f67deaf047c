//! Accepted connections under bounds, for both listeners: a cap on open
//! connections (accepting pauses at the cap, so the kernel's backlog holds
//! the rest), accept errors backed off instead of retried in a spin (out of
//! file descriptors), and an idle timeout that closes a connection on which
//! nothing has happened for too long.
//!
//! "Nothing happened" differs per listener: on gRPC it means no request in
//! flight and none started (HTTP/2 pings keep a connection alive for the
//! keepalive, not for the idle timeout); on the admin port, no byte read.
//!
//! A client that sends but never reads is held back: while writing to it is
//! blocked, nothing more is read from it (so it cannot queue unbounded
//! answers or stream resets in sluice's memory), and a connection whose
//! writes stay blocked for `write_stall` is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::{Listener, Metrics};

const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Closed after this long without activity.
    pub idle_timeout: Duration,
    /// Closed when the peer takes none of our bytes for this long.
    pub write_stall: Duration,
}

/// What a connection has been doing, shared between its socket and the
/// service that answers its requests.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `base` of the last activity.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Relaxed);
    }

    /// Marks a request as started; the guard marks it done when dropped.
    /// (No clock read here: while a request is in flight the connection is
    /// busy whatever `last_ms` says, and the guard records the end.)
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }

    /// When the connection becomes idle, given what is known now.
    fn idle_at(&self, idle: Duration) -> Instant {
        if self.in_flight.load(Relaxed) > 0 {
            return Instant::now() + idle;
        }
        self.base + Duration::from_millis(self.last_ms.load(Relaxed)) + idle
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A connection's place under the cap: the permit and the gauge go with it.
pub(crate) struct Ticket {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
    listener: Listener,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.metrics.connection(self.listener, false);
    }
}

/// An accepted socket with its ticket, before any handshake.
pub(crate) type Admitted<S = TcpStream> = (S, Ticket);

/// A listener the guards can accept from: TCP, or a Unix socket
/// (`--grpc-uds`).
pub(crate) trait Accept: Send + 'static {
    type Stream: Send + 'static;
    fn accept_one(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    async fn accept_one(&self) -> io::Result<TcpStream> {
        let (stream, _) = self.accept().await?;
        // Nagle off: tonic's own `tcp_nodelay` only applies to listeners it
        // binds, and a gRPC answer written in pieces would otherwise wait for
        // a delayed ACK (a 40 ms tail). Best effort.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

#[cfg(unix)]
impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn accept_one(&self) -> io::Result<tokio::net::UnixStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// Accepts on `listener` under `limits` until `token` is cancelled or the
/// receiver is dropped.
pub(crate) fn accept<L: Accept>(
    listener: L,
    limits: ConnLimits,
    kind: Listener,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) -> mpsc::Receiver<Admitted<L::Stream>> {
    let (tx, rx) = mpsc::channel(16);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        let mut backoff = Duration::ZERO;
        loop {
            let permit = tokio::select! {
                () = token.cancelled() => return,
                () = tx.closed() => return,
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let stream = tokio::select! {
                () = token.cancelled() => return,
                accepted = listener.accept_one() => match accepted {
                    Ok(stream) => stream,
                    Err(e) => {
                        metrics.accept_error();
                        if backoff.is_zero() {
                            warn!(listener = ?kind, error = %e, "accept failed; pausing before the next accept");
                        }
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_FIRST, ACCEPT_BACKOFF_MAX);
                        tokio::select! {
                            () = token.cancelled() => return,
                            () = tokio::time::sleep(backoff) => continue,
                        }
                    }
                },
            };
            backoff = Duration::ZERO;
            metrics.connection(kind, true);
            let ticket = Ticket {
                _permit: permit,
                metrics: metrics.clone(),
                listener: kind,
            };
            if tx.send((stream, ticket)).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Whose activity keeps a connection open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleBy {
    /// Requests, reported by the service through [`Activity::start`].
    Requests,
    /// Any byte read from the client.
    Reads,
}

/// A connection that closes itself after its idle timeout.
pub(crate) struct Guarded<IO> {
    io: IO,
    activity: Arc<Activity>,
    by: IdleBy,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    stall: Duration,
    /// Set while a write waits for the peer to take bytes.
    blocked: Option<Pin<Box<Sleep>>>,
    /// The reader held back while writes are blocked.
    reader: Option<Waker>,
    metrics: Arc<Metrics>,
    _ticket: Ticket,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(io: IO, ticket: Ticket, limits: ConnLimits, by: IdleBy) -> Guarded<IO> {
        let activity = Arc::new(Activity::new());
        Guarded {
            io,
            timer: Box::pin(tokio::time::sleep_until(
                Instant::now() + limits.idle_timeout,
            )),
            activity,
            by,
            idle: limits.idle_timeout,
            stall: limits.write_stall,
            blocked: None,
            reader: None,
            metrics: ticket.metrics.clone(),
            _ticket: ticket,
        }
    }

    /// Notes the outcome of a write: blocked starts the stall clock, done
    /// lets the held-back reader go.
    fn wrote<T>(&mut self, r: Poll<T>) -> Poll<T> {
        if r.is_pending() {
            if self.blocked.is_none() {
                self.blocked = Some(Box::pin(tokio::time::sleep(self.stall)));
            }
        } else if self.blocked.take().is_some()
            && let Some(w) = self.reader.take()
        {
            w.wake();
        }
        r
    }

    /// While writes are blocked: Pending (the reader is woken when they
    /// resume), or an error once they have been blocked for `stall`.
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<()>>> {
        let timer = self.blocked.as_mut()?;
        if timer.as_mut().poll(cx).is_ready() {
            return Some(Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer has taken none of our bytes for too long",
            ))));
        }
        self.reader = Some(cx.waker().clone());
        Some(Poll::Pending)
    }

    /// Pending until the idle timeout has passed with nothing happening.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let at = self.activity.idle_at(self.idle);
            if at <= Instant::now() {
                self.metrics.idle_closed();
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for longer than its idle timeout",
                )));
            }
            self.timer.as_mut().reset(at);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(stalled) = self.poll_stalled(cx) {
            return stalled;
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if self.by == IdleBy::Reads && buf.filled().len() > before {
                    self.activity.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.poll_idle(cx),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.wrote(r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO> tonic::transport::server::Connected for Guarded<IO> {
    /// Reaches the service in each request's extensions, so it can report
    /// the requests that keep the connection busy.
    type ConnectInfo = Arc<Activity>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.activity.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn ticket() -> Ticket {
        let permit = Arc::new(Semaphore::new(1))
            .try_acquire_owned()
            .expect("a permit");
        Ticket {
            _permit: permit,
            metrics: Arc::new(Metrics::default()),
            listener: Listener::Grpc,
        }
    }

    fn limits(idle: u64) -> ConnLimits {
        ConnLimits {
            max_connections: 1,
            idle_timeout: Duration::from_secs(idle),
            write_stall: Duration::from_secs(5),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_reads_is_not_read_from_and_is_closed() {
        let (mut client, server) = tokio::io::duplex(16);
        let mut g = Guarded::new(server, ticket(), limits(600), IdleBy::Reads);
        // Fill the peer's buffer: the next write blocks.
        g.write_all(&[1u8; 16]).await.expect("fits");
        let write = tokio::time::timeout(Duration::from_secs(1), g.write_all(&[2u8; 16])).await;
        assert!(write.is_err(), "blocked");
        // The peer sends, but nothing is read while writes are blocked...
        client.write_all(b"more").await.expect("client writes");
        let mut buf = [0u8; 4];
        let started = Instant::now();
        let e = g.read(&mut buf).await.expect_err("closed");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // ...and the connection is given up once the stall lasts.
        assert!(started.elapsed() <= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_held_back_resumes_when_the_peer_reads() {
        let (mut client, server) = tokio::io::duplex(16);
        let mut g = Guarded::new(server, ticket(), limits(600), IdleBy::Reads);
        g.write_all(&[1u8; 16]).await.expect("fits");
        let blocked = tokio::time::timeout(Duration::from_millis(10), g.write_all(&[2u8; 8])).await;
        assert!(blocked.is_err());
        client.write_all(b"hi").await.expect("client writes");
        let mut drained = [0u8; 16];
        client.read_exact(&mut drained).await.expect("peer reads");
        // The blocked write goes through, and reading resumes.
        g.write_all(&[2u8; 8]).await.expect("unblocked");
        let mut buf = [0u8; 2];
        g.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"hi");
    }

    #[tokio::test(start_paused = true)]
    async fn closes_after_the_idle_timeout_unless_a_request_is_in_flight() {
        let (client, server) = tokio::io::duplex(64);
        let mut g = Guarded::new(server, ticket(), limits(10), IdleBy::Requests);
        let busy = g.activity.start();
        let mut buf = [0u8; 8];
        // A request in flight for a minute: not idle.
        let read = tokio::time::timeout(Duration::from_secs(60), g.read(&mut buf)).await;
        assert!(read.is_err(), "still open while busy");
        drop(busy);
        let started = Instant::now();
        let e = g.read(&mut buf).await.expect_err("idle");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        drop(client);
    }

    #[tokio::test(start_paused = true)]
    async fn reads_keep_an_admin_connection_open() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut g = Guarded::new(server, ticket(), limits(10), IdleBy::Reads);
        let mut buf = [0u8; 8];
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(8)).await;
            client.write_all(b"x").await.expect("write");
            assert_eq!(g.read(&mut buf).await.expect("read"), 1);
        }
        let started = Instant::now();
        assert!(g.read(&mut buf).await.is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }
}
