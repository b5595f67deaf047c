//! sluice's service: everything that runs once `sluice serve` has built it.
//! The command line, the composition root and the tools sit above it, in the
//! `sluice` crate; the stores and the core below (`sluice-store`,
//! `sluice-core`). The compiler keeps the arrows one-way: nothing here can
//! name a flag, the composition root or a tool.
//!
//! - [`application::App`]: the running parts, handed to what serves.
//! - [`config`]: the YAML model, validation, the compiled matcher, loading,
//!   the one file watcher and xDS; [`background`]: work behind requests.
//! - [`service`]: the gRPC `ShouldRateLimit` handler; [`admin`]: HTTP endpoints;
//!   [`console`]: the operator's page on the admin port; [`counters`] and
//!   [`usage`]: lookups, resets and the advisor's reports.
//! - [`quota`]: Envoy's Rate Limit Quota Service, from the same rules.
//! - [`server`]: runs both on caller-bound listeners with one shutdown path;
//!   [`conn`]: connection bounds; [`tls`]: optional (mutual) TLS.
//! - [`request`]: a `RateLimitRequest` checked against the bounds;
//!   [`privacy`]: email values normalised and hashed at the edge;
//!   [`protojson`]: the `/json` door's codec; `refusal`: the one place a
//!   refusal becomes a gRPC status.
//! - [`metrics`]: Prometheus text; [`reference_metrics`]: the reference's
//!   names; [`statsd`]: its stats over UDP; [`telemetry`]: OpenTelemetry.
//! - [`stamp`]: how a rewritten file is noticed; [`table`]: plain-text tables
//!   of the admin port's JSON; [`fuzzing`]: entry points for cargo-fuzz.

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

pub mod admin;
pub mod application;
pub mod background;
pub mod config;
pub mod conn;
pub mod console;
pub mod counters;
pub mod fuzzing;
pub(crate) use sluice_core::hex;
/// Pure decisions, from the core crate (`crates/core`).
pub use sluice_core::limiter;
pub use sluice_store::key;
pub mod metrics;
pub mod privacy;
pub mod protojson;
pub mod quota;
pub mod reference_metrics;
mod refusal;
pub mod request;
/// The counters a rule counts into, from the core crate.
pub use sluice_core::rule_stats;
pub mod server;
pub mod service;
pub mod stamp;
pub mod statsd;
pub mod table;
/// The counter stores and their safety net, from the store crate (`crates/store`).
pub use sluice_store as store;
pub mod telemetry;
use sluice_core::text;
pub mod tls;
pub mod usage;
