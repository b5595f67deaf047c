//! What a connection has been doing, shared between its socket, its seat in
//! the listener's table and the service that answers its requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

use super::peer::Peer;

/// Requests in flight over all of one peer's connections: past its share,
/// sluice stops reading from that peer's connections until some finish.
#[derive(Debug, Default)]
pub(crate) struct PeerLoad {
    in_flight: AtomicUsize,
}

/// A connection's activity: requests in flight, bodies still arriving, and
/// when something last happened.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    in_flight: AtomicUsize,
    /// Requests whose body has not fully arrived: in flight, but not
    /// activity (a connection holding only half-sent bodies is idle).
    reading: AtomicUsize,
    /// Decisions of this connection waiting for the store.
    pub(crate) pending: AtomicUsize,
    /// Request body bytes received and not yet decoded, on this connection.
    pub(crate) body_bytes: AtomicUsize,
    /// Milliseconds after `base` of the last activity.
    last_ms: AtomicU64,
    /// The client has spoken its protocol's first words (the HTTP/2
    /// preface, or any byte on the admin port).
    established: AtomicBool,
    /// Whom the connection is counted against.
    pub(crate) peer: Peer,
    /// That peer's requests in flight, shared by its connections.
    load: Arc<PeerLoad>,
}

impl Activity {
    /// A connection seen alone (tests, and a request without one).
    pub(crate) fn new() -> Activity {
        Activity::with_load(Peer::Local, Arc::default())
    }

    pub(crate) fn with_load(peer: Peer, load: Arc<PeerLoad>) -> Activity {
        Activity {
            peer,
            load,
            base: Instant::now(),
            in_flight: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            body_bytes: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            established: AtomicBool::new(false),
        }
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Relaxed);
    }

    /// Marks a request as started; the guard marks it done when dropped.
    /// (No clock read here: while a request is in flight the connection is
    /// busy whatever `last_ms` says, and the guard records the end.)
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.load.in_flight.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }

    /// Requests in flight over all of this connection's peer's connections.
    pub(crate) fn peer_in_flight(&self) -> usize {
        self.load.in_flight.load(Relaxed)
    }

    /// Marks a request body as arriving; [`Activity::body_done`] ends it.
    pub(crate) fn body_started(&self) {
        self.reading.fetch_add(1, Relaxed);
    }

    /// (No clock read: the request is still in flight, so the connection
    /// is busy until its guard records the end.)
    pub(crate) fn body_done(&self) {
        self.reading.fetch_sub(1, Relaxed);
    }

    /// A request body of this connection is still arriving: only reading
    /// the connection lets that request finish.
    pub(crate) fn awaiting_body(&self) -> bool {
        self.reading.load(Relaxed) > 0
    }

    pub(crate) fn establish(&self) {
        if !self.established.swap(true, Relaxed) {
            self.touch();
        }
    }

    pub(crate) fn is_established(&self) -> bool {
        self.established.load(Relaxed)
    }

    /// Requests in flight whose body has arrived.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight.load(Relaxed) > self.reading.load(Relaxed)
    }

    /// When something last happened on the connection.
    pub(crate) fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Relaxed))
    }

    /// When the connection becomes idle, given what is known now.
    pub(crate) fn idle_at(&self, idle: Duration) -> Instant {
        if self.busy() {
            return Instant::now() + idle;
        }
        self.last() + idle
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Relaxed);
        self.0.load.in_flight.fetch_sub(1, Relaxed);
    }
}
