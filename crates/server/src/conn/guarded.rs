//! A connection under its listener's bounds: closed after the idle timeout,
//! after `--handshake-timeout` if it never spoke, when its seat is given to a
//! newcomer, and when its peer takes none of our bytes for `write_stall`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::activity::Activity;
use super::{ConnBounds, Ticket};
use crate::metrics::{Bound, Metrics};

/// Bytes of the HTTP/2 client preface: a gRPC client that has sent them
/// has spoken.
const H2_PREFACE: usize = 24;

/// How often a connection paused for its peer's load looks again.
const PAUSE_RECHECK: Duration = Duration::from_millis(1);

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
    /// Bytes read so far, until the connection counts as established.
    heard: usize,
    /// Cancelled when the seat is given to a newcomer.
    evicted: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The token `evicted` waits on, for a check without a poll.
    close: CancellationToken,
    /// The waker `timer` and `evicted` were last polled with: each holds
    /// it, so while the task's waker is the same a pending read need not
    /// poll them again (two polls were a tenth of sluice's own cost of a
    /// request); one that fired is seen by its check.
    armed: Option<Waker>,
    stall: Duration,
    /// Set while a write waits for the peer to take bytes.
    blocked: Option<Pin<Box<Sleep>>>,
    /// `max_in_flight_per_peer`, and the timer that looks again while the
    /// peer is over it.
    peer_share: usize,
    paused: Option<Pin<Box<Sleep>>>,
    /// The reader held back while writes are blocked.
    reader: Option<Waker>,
    metrics: Arc<Metrics>,
    _ticket: Ticket,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(io: IO, ticket: Ticket, limits: ConnBounds, by: IdleBy) -> Guarded<IO> {
        let activity = ticket.activity.clone();
        let first = limits.idle_timeout.min(limits.handshake_timeout);
        Guarded {
            io,
            timer: Box::pin(tokio::time::sleep_until(Instant::now() + first)),
            heard: 0,
            evicted: Box::pin(ticket.close.clone().cancelled_owned()),
            close: ticket.close.clone(),
            armed: None,
            activity,
            by,
            idle: limits.idle_timeout,
            stall: limits.write_stall,
            blocked: None,
            peer_share: match by {
                IdleBy::Requests => limits.max_in_flight_per_peer,
                IdleBy::Reads => 0,
            },
            paused: None,
            reader: None,
            metrics: ticket.metrics.clone(),
            _ticket: ticket,
        }
    }

    /// Notes bytes read: reads are activity on the admin port, and the
    /// first words make a connection established.
    fn heard(&mut self, n: usize) {
        if self.by == IdleBy::Reads {
            self.activity.touch();
        }
        if self.heard < H2_PREFACE {
            self.heard += n;
            let enough = match self.by {
                IdleBy::Reads => 1,
                IdleBy::Requests => H2_PREFACE,
            };
            if self.heard >= enough {
                self.activity.establish();
            }
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

    /// Pending while the peer has more requests in flight than its share,
    /// looking again every [`PAUSE_RECHECK`]: its connections are not read
    /// (their bytes wait in the kernel and the peer's own buffers), so a
    /// flood from one peer cannot queue more work ahead of everyone else's.
    /// A connection with a request body still arriving is read anyway: that
    /// request counts against the share and can only finish if its body is
    /// read (pausing it deadlocked until the body timeout).
    fn poll_paused(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.peer_share == 0 || !self.over_share() {
            self.paused = None;
            return Poll::Ready(());
        }
        if self.paused.is_none() && self.metrics.bound_hit(Bound::PeerPaused, 1) {
            tracing::warn!(
                peer = %self.activity.peer.masked(),
                "a peer has --grpc-max-in-flight-per-peer requests in flight; not reading from its connections until some finish (logged once per 10 s)"
            );
        }
        loop {
            let timer = self
                .paused
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(PAUSE_RECHECK)));
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if !self.over_share() {
                self.paused = None;
                return Poll::Ready(());
            }
            self.paused = None;
        }
    }

    fn over_share(&self) -> bool {
        self.activity.peer_in_flight() >= self.peer_share && !self.activity.awaiting_body()
    }

    /// Pending until the idle timeout has passed with nothing happening.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let quiet = self.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
            && !self.timer.is_elapsed()
            && !self.close.is_cancelled();
        if quiet {
            return Poll::Pending;
        }
        self.armed = None;
        if self.evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to seat a connection from a peer under its share",
            )));
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                self.armed = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if !self.activity.is_established() {
                if self.metrics.bound_hit(Bound::Handshake, 1) {
                    tracing::warn!(
                        "closed a connection that sent no preface within --handshake-timeout (logged once per 10 s; sluice_bound_hits_total{{bound=\"handshake_timeout\"}} counts them)"
                    );
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no preface within --handshake-timeout",
                )));
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
        if self.poll_paused(cx).is_pending() {
            return Poll::Pending;
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                let got = buf.filled().len() - before;
                if got > 0 {
                    self.heard(got);
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
        if self.evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
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
#[path = "guarded_tests.rs"]
mod tests;
