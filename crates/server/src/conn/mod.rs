//! Accepted connections under bounds, for both listeners: a cap on open
//! connections and a share per peer (a full cap seats a newcomer by closing
//! the least useful connection, [`seats`]), a handshake timeout for
//! connections that never speak, accept errors backed off instead of
//! retried in a spin (out of file descriptors), and an idle timeout that
//! closes a connection on which nothing has happened for too long.
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
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::{Bound, Listener, Metrics};

mod activity;
mod body;
mod guarded;
mod peer;
mod seats;

pub(crate) use activity::{Activity, InFlight};
pub use body::Metered;
pub(crate) use body::{BodyBudget, BodyWatch};
pub(crate) use guarded::{Guarded, IdleBy};
pub(crate) use peer::Peer;
use seats::{Held, SeatBounds, Seats};

const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnBounds {
    /// Connections open at once; at the cap a newcomer is seated by closing
    /// the least useful connection.
    pub max_connections: usize,
    /// Connections one peer (an IPv4 address, an IPv6 /64) may hold.
    pub max_per_peer: usize,
    /// Closed if it sends no preface (any byte on the admin port; the TLS
    /// handshake on TLS) within this.
    pub handshake_timeout: Duration,
    /// Requests one peer may have in flight over all its connections; past
    /// it nothing more is read from that peer until some finish (0: no
    /// bound). gRPC only.
    pub max_in_flight_per_peer: usize,
    /// Closed after this long without activity.
    pub idle_timeout: Duration,
    /// Closed when the peer takes none of our bytes for this long.
    pub write_stall: Duration,
}

/// A connection's place under the cap: its seat, the permit and the gauge
/// go with it.
pub(crate) struct Ticket {
    _permit: OwnedSemaphorePermit,
    _seat: Held,
    pub(crate) activity: Arc<Activity>,
    /// Cancelled when the seat is given to a newcomer.
    pub(crate) close: CancellationToken,
    metrics: Arc<Metrics>,
    listener: Listener,
}

impl Ticket {
    /// The metrics the connection counts into.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
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
    fn accept_one(&self) -> impl Future<Output = io::Result<(Self::Stream, Peer)>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    async fn accept_one(&self) -> io::Result<(TcpStream, Peer)> {
        let (stream, addr) = self.accept().await?;
        // Nagle off: tonic's own `tcp_nodelay` only applies to listeners it
        // binds, and a gRPC answer written in pieces would otherwise wait for
        // a delayed ACK (a 40 ms tail). Best effort.
        let _ = stream.set_nodelay(true);
        Ok((stream, Peer::of(addr.ip())))
    }
}

#[cfg(unix)]
impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn accept_one(&self) -> io::Result<(tokio::net::UnixStream, Peer)> {
        self.accept().await.map(|(stream, _)| (stream, Peer::Local))
    }
}

/// Accepts on `listener` under `limits` until `token` is cancelled or the
/// receiver is dropped.
pub(crate) fn accept<L: Accept>(
    listener: L,
    limits: ConnBounds,
    kind: Listener,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) -> mpsc::Receiver<Admitted<L::Stream>> {
    let (tx, rx) = mpsc::channel(16);
    let seats = Seats::new(SeatBounds {
        total: limits.max_connections,
        per_peer: limits.max_per_peer,
    });
    // The hard bound on descriptors: seats, plus those closed to make room
    // that have not finished closing yet.
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max + (max / 16).max(16)));
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
            let (stream, peer) = tokio::select! {
                () = token.cancelled() => return,
                accepted = listener.accept_one() => match accepted {
                    Ok(accepted) => accepted,
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
            let ticket = seat(&seats, peer, permit, kind, &metrics);
            if tx.send((stream, ticket)).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Seats an accepted connection, logging (rate-limited) when that closed
/// another one.
fn seat(
    seats: &Arc<Seats>,
    peer: Peer,
    permit: OwnedSemaphorePermit,
    kind: Listener,
    metrics: &Arc<Metrics>,
) -> Ticket {
    let close = CancellationToken::new();
    let (held, activity, evicted) = seats.seat(peer, close.clone());
    if let Some(e) = evicted {
        let bound = match kind {
            Listener::Grpc => Bound::GrpcEvicted,
            Listener::Admin => Bound::AdminEvicted,
        };
        if metrics.bound_hit(bound, 1) {
            let cap = if e.peer_full {
                "the newcomer's peer was at --*-max-connections-per-peer"
            } else {
                "the listener was at --*-max-connections"
            };
            warn!(listener = ?kind, peer = %e.peer.masked(), peer_held = e.held, "{cap}: closed that peer's least useful connection to seat a newcomer (logged once per 10 s; sluice_bound_hits_total counts each)");
        }
    }
    metrics.connection(kind, true);
    Ticket {
        _permit: permit,
        _seat: held,
        activity,
        close,
        metrics: metrics.clone(),
        listener: kind,
    }
}
