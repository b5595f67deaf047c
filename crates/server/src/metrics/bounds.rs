//! Every bound that can fill under hostile volume, counted in one labelled
//! series (`sluice_bound_hits_total{bound}`) and logged at most once per
//! [`LOG_EVERY`] per bound, so a flood is visible without flooding the log.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::{Metrics, encode};

/// Seconds between two log lines about the same bound.
pub const LOG_EVERY: u64 = 10;

/// A bound that was reached, and what sluice did about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The gRPC connection cap (or a peer's share) was full: the least
    /// useful connection was closed to seat a newcomer.
    GrpcEvicted,
    AdminEvicted,
    /// A connection that sent no preface (or finished no TLS handshake)
    /// within `--handshake-timeout`.
    Handshake,
    /// A request body not complete within `--body-timeout`.
    BodyTimeout,
    /// A request body refused: the connection's or the process's request
    /// bytes in flight were at their bound.
    BodyBytes,
    /// A peer's connections not read for a while: it had
    /// `--grpc-max-in-flight-per-peer` requests in flight.
    PeerPaused,
    /// A request answered at once because `--max-pending` decisions were
    /// already waiting for the store.
    Shed,
    /// A request dropped before its store call: its caller had gone (reset,
    /// or past its `grpc-timeout`).
    Abandoned,
    /// A quota stream refused: its peer held its share of streams.
    QuotaPeerStreams,
    /// A quota stream closed after sending nothing for `--quota-stream-idle`.
    QuotaSilent,
    /// An xDS stream failed (or stopped answering its keepalive) and was
    /// replaced.
    XdsStreamFailed,
    /// xDS generations folded into one apply (a burst of versions).
    XdsCoalesced,
}

impl Bound {
    pub const ALL: [Bound; 12] = [
        Bound::GrpcEvicted,
        Bound::AdminEvicted,
        Bound::Handshake,
        Bound::BodyTimeout,
        Bound::BodyBytes,
        Bound::PeerPaused,
        Bound::Shed,
        Bound::Abandoned,
        Bound::QuotaPeerStreams,
        Bound::QuotaSilent,
        Bound::XdsStreamFailed,
        Bound::XdsCoalesced,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bound::GrpcEvicted => "grpc_connection_evicted",
            Bound::AdminEvicted => "admin_connection_evicted",
            Bound::Handshake => "handshake_timeout",
            Bound::BodyTimeout => "body_timeout",
            Bound::BodyBytes => "body_bytes",
            Bound::PeerPaused => "peer_paused",
            Bound::Shed => "shed",
            Bound::Abandoned => "abandoned",
            Bound::QuotaPeerStreams => "quota_peer_streams",
            Bound::QuotaSilent => "quota_silent_stream",
            Bound::XdsStreamFailed => "xds_stream_failed",
            Bound::XdsCoalesced => "xds_coalesced",
        }
    }

    fn index(self) -> usize {
        Bound::ALL.iter().position(|b| *b == self).unwrap_or(0)
    }
}

/// The counters, and when each was last logged (seconds since the epoch).
#[derive(Debug, Default)]
pub(crate) struct BoundCounters {
    hits: [AtomicU64; Bound::ALL.len()],
    logged: [AtomicU64; Bound::ALL.len()],
}

impl Metrics {
    /// Counts `n` hits of `bound`; true when the caller should log it now
    /// (the first hit, then at most once per [`LOG_EVERY`] seconds).
    pub fn bound_hit(&self, bound: Bound, n: u64) -> bool {
        let i = bound.index();
        let (Some(hits), Some(logged)) = (self.bounds.hits.get(i), self.bounds.logged.get(i))
        else {
            return false;
        };
        hits.fetch_add(n, Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = logged.load(Relaxed);
        now >= last.saturating_add(LOG_EVERY)
            && logged.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
    }

    /// Hits of `bound` since start.
    pub fn bound_hits(&self, bound: Bound) -> u64 {
        self.bounds
            .hits
            .get(bound.index())
            .map_or(0, |h| h.load(Relaxed))
    }
}

impl Collector for BoundCounters {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        encode::counters(
            &mut enc,
            "sluice_bound_hits",
            "Times a bound against hostile volume was reached, by bound (see the README's Security section).",
            Bound::ALL
                .iter()
                .zip(&self.hits)
                .map(|(b, c)| ([("bound", b.name())], c.load(Relaxed))),
        )
    }
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
