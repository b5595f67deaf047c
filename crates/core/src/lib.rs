//! sluice's core: what a rate limiter decides, with nothing of how it is
//! asked or where it counts. It depends on `std` alone, so nothing here can
//! reach a socket, a store, protobuf or metrics: the `sluice` crate builds
//! on it, and the compiler refuses an import the other way.
//!
//! - [`limiter`]: pure decisions (windows, hits, statuses, Retry-After).
//! - [`rule_stats`]: the counters a rule counts into, and [`usage`]: how
//!   keys use each limit (levels, history, what a limit would refuse).
//! - [`hex`] and [`text`]: lowercase hex, and outside text cut to a bound.

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

pub mod hex;
pub mod limiter;
pub mod rule_stats;
pub mod text;
pub mod usage;
