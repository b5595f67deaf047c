//! Following a Sentinel's master while connected to it. Asking the
//! sentinels only when (re)connecting is not enough: a master killed while
//! its replica was promoted restarts as a master of its own, empty, and
//! answers every increment until a sentinel demotes it (seconds later). An
//! instance that reconnected to it in that gap counts there while the rest
//! of the fleet counts on the promoted replica: two masters, each key
//! admitted up to twice its limit. So while a connection lives, the
//! sentinels are asked again every [`EVERY`]; once they name another
//! master, the connection is dropped, the breaker and the failure policy
//! answer the gap, and the recovery probe connects to the master named.

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;

use super::{Live, RedisConfig, Sentinel, mask};

/// How often a live Sentinel connection asks whether its node is still the
/// master: the longest a fleet can count on two masters after a sentinel
/// has named the new one (plus one sentinel round trip).
pub(super) const EVERY: Duration = Duration::from_secs(1);

/// Asks the sentinels every [`EVERY`] while `ours` is the live connection;
/// drops it from `slot` once they name a master other than `url`. A
/// sentinel that does not answer changes nothing: the connection's own
/// errors say when the node is gone.
pub(super) async fn keep_asking(
    slot: Weak<ArcSwapOption<Live>>,
    ours: Weak<Live>,
    url: String,
    sentinel: Sentinel,
    config: RedisConfig,
) {
    loop {
        tokio::time::sleep(EVERY).await;
        // Held only to look, never across the question: a replaced
        // connection is not kept open by its watcher.
        let watched = slot.upgrade().zip(ours.upgrade());
        if !watched.is_some_and(|(slot, live)| is_current(&slot, &live)) {
            return;
        }
        let named = sentinel
            .master_url(config.connect_timeout, config.tls.as_ref())
            .await;
        let Ok(named) = named else { continue };
        if named == url {
            continue;
        }
        let (Some(slot), Some(live)) = (slot.upgrade(), ours.upgrade()) else {
            return;
        };
        tracing::warn!(
            connected = %mask(&url),
            named = %mask(&named),
            "the sentinels name another master: dropping the connection to the old one"
        );
        // Only the connection this task watches: a reconnect in between
        // already follows the sentinels.
        let current = slot.load();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &live)) {
            slot.compare_and_swap(&current, None);
        }
        return;
    }
}

fn is_current(slot: &ArcSwapOption<Live>, live: &Arc<Live>) -> bool {
    slot.load().as_ref().is_some_and(|c| Arc::ptr_eq(c, live))
}
