//! Redis's clock (`TIME`), which this process's decisions follow
//! ([`crate::limiter::clock`]): read when a connection is proven, and again
//! every [`EVERY`] while it lives, so the monotonic clock's drift and a step
//! of Redis's own are caught up with.

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::Live;
use crate::limiter::clock;

/// How often the anchor is renewed while a connection lives.
const EVERY: Duration = Duration::from_secs(5);
/// Readings per renewal; the one with the shortest round trip is kept (it
/// says the most exactly when Redis read its clock).
const READINGS: usize = 3;

/// Reads Redis's clock over `conn` and anchors this process's to it. A
/// Redis that refuses `TIME` (renamed away) leaves the host's clock in
/// charge, which is said once per connection.
pub(super) async fn read(conn: &mut impl redis::aio::ConnectionLike) {
    let mut best: Option<(u64, Instant, Instant)> = None;
    for _ in 0..READINGS {
        let sent = Instant::now();
        let got: Result<(u64, u64), _> = redis::cmd("TIME").query_async(conn).await;
        let answered = Instant::now();
        match got {
            Ok((s, us)) => {
                let at = s.saturating_mul(1_000_000).saturating_add(us);
                let rtt = answered - sent;
                if best.is_none_or(|(_, a, b)| b - a > rtt) {
                    best = Some((at, sent, answered));
                }
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "redis refused TIME: windows follow this host's clock, not the store's"
                );
                return;
            }
        }
    }
    if let Some((at, sent, answered)) = best {
        clock::follow(at, sent, answered);
    }
}

/// Renews the anchor every [`EVERY`] until the connection is replaced.
pub(super) async fn keep_following(live: Weak<Live>) {
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(live) = live.upgrade() else { return };
        match &*live {
            Live::Single(_, pool) => {
                if let Ok(conn) = pool.get().await {
                    read(&mut conn.clone()).await;
                }
            }
            Live::Cluster(conn) => read(&mut conn.clone()).await,
        }
    }
}
