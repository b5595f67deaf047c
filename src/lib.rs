//! sluice: a rate-limit service for Envoy's `ratelimit` filter, reading
//! envoyproxy/ratelimit configs unchanged.
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
//! - [`fuzzing`]: entry points for cargo-fuzz; [`hex`]: lowercase hex.

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

pub(crate) mod admin;
pub mod app;
pub mod application;
pub(crate) mod background;
pub mod cli;
pub mod config;
pub(crate) mod conn;
pub mod console;
pub(crate) mod counters;
pub(crate) mod envoy_check;
pub mod fuzzing;
pub(crate) mod health_probe;
pub(crate) use sluice_core::hex;
/// Pure decisions, from the core crate (`crates/core`).
pub use sluice_core::limiter;
pub(crate) use sluice_store::key;
pub(crate) mod loadgen;
pub mod metrics;
pub mod privacy;
pub(crate) mod protojson;
pub(crate) mod quota;
pub mod reference_env;
pub(crate) mod reference_metrics;
mod refusal;
pub(crate) mod request;
/// The counters a rule counts into, from the core crate.
pub use sluice_core::rule_stats;
pub(crate) mod server;
pub mod service;
pub(crate) mod stamp;
pub(crate) mod statsd;
pub(crate) mod table;
/// The counter stores and their safety net, from the store crate (`crates/store`).
pub use sluice_store as store;
pub(crate) mod telemetry;
use sluice_core::text;
pub(crate) mod tls;
pub(crate) mod usage;
