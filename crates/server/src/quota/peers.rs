//! Quota mode's share per peer: streams and buckets one peer (an IPv4
//! address, an IPv6 /64) may hold, so one client cannot take every stream
//! or every bucket place of the instance and leave other Envoys unserved.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::conn::Peer;

#[derive(Debug, Default, Clone, Copy)]
struct Hold {
    streams: usize,
    buckets: usize,
}

/// What each peer holds now.
#[derive(Debug)]
pub(crate) struct Peers {
    table: Mutex<HashMap<Peer, Hold>>,
    max_streams: usize,
    max_buckets: usize,
}

/// Which of a peer's holdings a guard gives back.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Stream,
    Bucket,
}

/// One stream or bucket held by a peer; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct PeerHold {
    peers: Arc<Peers>,
    peer: Peer,
    kind: Kind,
}

impl Drop for PeerHold {
    fn drop(&mut self) {
        let mut t = self.peers.table.lock();
        if let Some(h) = t.get_mut(&self.peer) {
            match self.kind {
                Kind::Stream => h.streams = h.streams.saturating_sub(1),
                Kind::Bucket => h.buckets = h.buckets.saturating_sub(1),
            }
            if h.streams == 0 && h.buckets == 0 {
                t.remove(&self.peer);
            }
        }
    }
}

impl Peers {
    pub(crate) fn new(max_streams: usize, max_buckets: usize) -> Arc<Peers> {
        Arc::new(Peers {
            table: Mutex::default(),
            max_streams: max_streams.max(1),
            max_buckets: max_buckets.max(1),
        })
    }

    fn take(self: &Arc<Self>, peer: Peer, kind: Kind) -> Option<PeerHold> {
        let mut t = self.table.lock();
        let h = t.entry(peer).or_default();
        let (n, max) = match kind {
            Kind::Stream => (&mut h.streams, self.max_streams),
            Kind::Bucket => (&mut h.buckets, self.max_buckets),
        };
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerHold {
            peers: self.clone(),
            peer,
            kind,
        })
    }

    /// A stream for `peer`, unless it holds `--quota-max-streams-per-peer`.
    pub(crate) fn stream(self: &Arc<Self>, peer: Peer) -> Option<PeerHold> {
        self.take(peer, Kind::Stream)
    }

    /// A bucket for `peer`, unless it holds `--quota-max-buckets-per-peer`.
    pub(crate) fn bucket(self: &Arc<Self>, peer: Peer) -> Option<PeerHold> {
        self.take(peer, Kind::Bucket)
    }
}

#[cfg(test)]
#[path = "peers_tests.rs"]
mod tests;
