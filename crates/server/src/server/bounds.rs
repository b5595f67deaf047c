//! The bounds of the gRPC listener, with their defaults (each a flag).

use std::time::Duration;

use crate::conn::ConnBounds;

/// What one client may hold on the gRPC listener.
#[derive(Debug, Clone, Copy)]
pub struct GrpcBounds {
    pub conn: ConnBounds,
    /// Concurrent HTTP/2 streams per connection.
    pub max_streams: u32,
    /// Streams refused or reset by sluice on one connection before it is
    /// closed with GOAWAY (ENHANCE_YOUR_CALM).
    pub max_reset_streams: usize,
    /// Streams the client reset before sluice accepted them, waiting on one
    /// connection at once, before it is closed with GOAWAY
    /// (ENHANCE_YOUR_CALM): the rapid-reset guard (CVE-2023-44487).
    pub max_pending_resets: usize,
    /// HTTP/2 PING interval, and how long an answer may take before the
    /// connection is dropped as dead.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Bounds on request bodies.
    pub body: BodyBounds,
}

/// Bounds on `ShouldRateLimit` request bodies still arriving.
#[derive(Debug, Clone, Copy)]
pub struct BodyBounds {
    /// A body not whole within this is refused (`--body-timeout`).
    pub timeout: Duration,
    /// Bytes received and not yet decoded, per connection.
    pub per_connection: usize,
    /// The same over the process; past it, connections above their even
    /// share are refused.
    pub per_process: usize,
}

impl Default for BodyBounds {
    fn default() -> Self {
        BodyBounds {
            timeout: Duration::from_secs(5),
            per_connection: 4 << 20,
            per_process: 256 << 20,
        }
    }
}

impl Default for GrpcBounds {
    fn default() -> Self {
        GrpcBounds {
            conn: ConnBounds {
                max_connections: 4096,
                max_per_peer: 512,
                handshake_timeout: Duration::from_secs(5),
                max_in_flight_per_peer: 512,
                idle_timeout: Duration::from_secs(300),
                write_stall: Duration::from_secs(20),
            },
            max_streams: 1024,
            max_reset_streams: 1024,
            // Not h2's 20: a sluice stalled past Envoy's filter timeout
            // reads that many requests and their resets at once from 32
            // clients (tests/envoy.rs). As many as the streams a connection
            // may hold; the guard bounds what one read leaves waiting, not
            // how often, so 20 bought no rate against an attacker.
            max_pending_resets: 1024,
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            body: BodyBounds::default(),
        }
    }
}
