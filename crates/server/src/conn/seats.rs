//! Who holds a listener's connections, so that a full cap seats a newcomer
//! instead of refusing it: when the listener (or the newcomer's own peer) is
//! at its cap, the least useful connection is closed. Least useful means,
//! in order: held by the peer with the most connections, not yet
//! established (no preface), idle, and quiet for longest. So a peer under
//! its share is always seated, and a peer hoarding connections only ever
//! loses its own.
//!
//! Only accepting takes the table's lock; requests never do.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::activity::{Activity, PeerLoad};
use super::peer::Peer;

/// Bounds of one listener's table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeatBounds {
    pub(crate) total: usize,
    pub(crate) per_peer: usize,
}

struct Seat {
    peer: Peer,
    activity: Arc<Activity>,
    close: CancellationToken,
    /// Asked to close; no longer counted.
    closing: bool,
}

#[derive(Default)]
struct Table {
    next: u64,
    seats: HashMap<u64, Seat>,
    /// Seats per peer, not counting those closing.
    peers: HashMap<Peer, usize>,
    /// Each peer's requests in flight, and its seats closing ones included:
    /// the load goes with the peer's last seat.
    loads: HashMap<Peer, (Arc<PeerLoad>, usize)>,
    open: usize,
}

/// A listener's connections.
pub(crate) struct Seats {
    limits: SeatBounds,
    table: Mutex<Table>,
}

/// A connection closed to seat a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evicted {
    pub(crate) peer: Peer,
    /// Connections that peer held before.
    pub(crate) held: usize,
    /// Because the newcomer's peer was at `--*-max-connections-per-peer`
    /// (else the listener was at its cap).
    pub(crate) peer_full: bool,
}

/// A connection's seat; dropping it gives the seat back.
pub(crate) struct Held {
    id: u64,
    seats: Arc<Seats>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut t = self.seats.table.lock();
        if let Some(seat) = t.seats.remove(&self.id) {
            if !seat.closing {
                t.release(seat.peer);
            }
            if let Some((_, n)) = t.loads.get_mut(&seat.peer) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    t.loads.remove(&seat.peer);
                }
            }
        }
    }
}

impl Table {
    fn release(&mut self, peer: Peer) {
        self.open = self.open.saturating_sub(1);
        if let Some(n) = self.peers.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.peers.remove(&peer);
            }
        }
    }

    fn held_by(&self, peer: Peer) -> usize {
        self.peers.get(&peer).copied().unwrap_or(0)
    }

    /// The least useful open seat, among `only`'s when given.
    fn victim(&self, only: Option<Peer>) -> Option<u64> {
        self.seats
            .iter()
            .filter(|(_, s)| !s.closing && only.is_none_or(|p| p == s.peer))
            .max_by_key(|(_, s)| {
                (
                    self.held_by(s.peer),
                    !s.activity.is_established(),
                    !s.activity.busy(),
                    std::cmp::Reverse(s.activity.last()),
                )
            })
            .map(|(id, _)| *id)
    }

    fn evict(&mut self, id: u64, peer_full: bool) -> Option<Evicted> {
        let seat = self.seats.get_mut(&id)?;
        seat.closing = true;
        seat.close.cancel();
        let peer = seat.peer;
        let held = self.held_by(peer);
        self.release(peer);
        Some(Evicted {
            peer,
            held,
            peer_full,
        })
    }
}

impl Seats {
    pub(crate) fn new(limits: SeatBounds) -> Arc<Seats> {
        Arc::new(Seats {
            limits: SeatBounds {
                total: limits.total.max(1),
                per_peer: limits.per_peer.max(1),
            },
            table: Mutex::default(),
        })
    }

    /// Seats a connection from `peer`, closing the least useful one first
    /// when a cap is full. `close` is cancelled if this one is evicted later.
    /// The connection's activity shares its peer's load.
    pub(crate) fn seat(
        self: &Arc<Self>,
        peer: Peer,
        close: CancellationToken,
    ) -> (Held, Arc<Activity>, Option<Evicted>) {
        let mut t = self.table.lock();
        let load = {
            let (load, n) = t.loads.entry(peer).or_default();
            *n += 1;
            load.clone()
        };
        let activity = Arc::new(Activity::with_load(peer, load));
        let mut evicted = None;
        if t.held_by(peer) >= self.limits.per_peer {
            evicted = t.victim(Some(peer)).and_then(|id| t.evict(id, true));
        } else if t.open >= self.limits.total {
            evicted = t.victim(None).and_then(|id| t.evict(id, false));
        }
        let id = t.next;
        t.next += 1;
        t.seats.insert(
            id,
            Seat {
                peer,
                activity: activity.clone(),
                close,
                closing: false,
            },
        );
        *t.peers.entry(peer).or_default() += 1;
        t.open += 1;
        drop(t);
        (
            Held {
                id,
                seats: self.clone(),
            },
            activity,
            evicted,
        )
    }

    /// Peers whose load is kept.
    #[cfg(test)]
    pub(crate) fn loads(&self) -> usize {
        self.table.lock().loads.len()
    }

    /// Seats counted now (those asked to close are not).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.table.lock().open
    }
}

#[cfg(test)]
#[path = "seats_tests.rs"]
mod tests;
