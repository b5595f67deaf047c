//! sluice: a rate-limit service for Envoy's `ratelimit` filter, reading
//! envoyproxy/ratelimit configs unchanged. This crate is the command line,
//! the composition root and the tools; what serves is `sluice-server`
//! (`crates/server`), re-exported here under its old paths.
//!
//! - [`cli`]: the command line, the only place flags become settings;
//!   [`app`]: the composition root that builds and runs what they describe,
//!   handing [`application::App`] (the running parts) to what serves;
//!   [`reference_env`]: `ratelimit` mode, envoyproxy/ratelimit's environment
//!   as those flags; [`health_probe`]: `sluice health`.
//! - [`loadgen`]: `sluice bench`, a load generator for any rate-limit service.
//! - [`config`]: the YAML model, validation, the compiled matcher, loading.
//! - [`limiter`]: pure decisions (windows, hits, statuses, Retry-After).
//! - [`store`]: counter stores behind one trait.
//! - [`privacy`]: email values normalised and hashed at the edge.
//! - [`service`]: the gRPC `ShouldRateLimit` handler; [`admin`]: HTTP endpoints;
//!   [`console`]: the operator's page on the admin port.
//! - [`tls`]: optional (mutual) TLS on the gRPC listener, reloaded on change.
//! - [`conn`]: connection bounds (cap, idle timeout, accept backoff).
//! - [`quota`]: Envoy's Rate Limit Quota Service, from the same rules.
//! - [`statsd`]: the reference's stats over UDP; [`telemetry`]: OpenTelemetry traces.
//! - [`server`]: runs both on caller-bound listeners with one shutdown path.
//! - [`request`]: a `RateLimitRequest` checked against the bounds;
//!   [`protojson`]: the `/json` door's codec; [`metrics`]: Prometheus text;
//!   `refusal`: the one place a refusal becomes a gRPC status.
//! - [`key`]: collision-free counter keys, shared by the stores and the
//!   console's top keys.
//! - [`fuzzing`]: entry points for cargo-fuzz.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
// A request must never panic: no unwrap, expect or unchecked indexing outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod app;
pub mod cli;
pub(crate) mod envoy_check;
pub(crate) mod health_probe;
pub(crate) mod loadgen;
pub mod reference_env;
pub use sluice_server::*;
