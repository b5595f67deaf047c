//! Following a Sentinel's master while connected to it. Asking the
//! sentinels only when (re)connecting is not enough: a master killed while
//! its replica was promoted restarts as a master of its own, empty, and
//! answers every increment until a sentinel demotes it (seconds later). An
//! instance that reconnected to it in that gap counts there while the rest
//! of the fleet counts on the promoted replica: two masters, each key
//! admitted up to twice its limit. So while a connection lives, the
//! sentinels are asked again: when one announces a failover of this master
//! (`+switch-master`, heard on every sentinel), when a call to the node
//! fails, and every `--redis-sentinel-recheck` in case an announcement was
//! missed. Once they name another master, the connection is dropped, the
//! breaker and the failure policy answer the gap, and the recovery probe
//! connects to the master named.

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt as _;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::{Live, RedisConfig, Sentinel, mask, pool};

/// The least time between two questions to the sentinels, so a storm of
/// failed calls asks them at most ten times a second.
const LEAST_GAP: Duration = Duration::from_millis(100);

/// Asks the sentinels while `ours` is the live connection to `url`: every
/// `config.sentinel_recheck`, when a sentinel announces a failover of the
/// master, and when `failed` is poked; drops it from `slot` once they name
/// a master other than `url`. A sentinel that does not answer changes
/// nothing: the connection's own errors say when the node is gone.
pub(super) async fn keep_asking(
    slot: Weak<ArcSwapOption<Live>>,
    ours: Weak<Live>,
    (url, sentinel): (String, Sentinel),
    config: RedisConfig,
    failed: Arc<Notify>,
) {
    let switched = Arc::new(Notify::new());
    // Dropped (every listener aborted) when this watch ends.
    let _listeners = listen(&sentinel, &config, &switched);
    loop {
        tokio::select! {
            () = tokio::time::sleep(config.sentinel_recheck) => {}
            () = switched.notified() => {}
            () = failed.notified() => {}
        }
        // Held only to look, never across the question: a replaced
        // connection is not kept open by its watcher.
        let watched = slot.upgrade().zip(ours.upgrade());
        if !watched.is_some_and(|(slot, live)| is_current(&slot, &live)) {
            return;
        }
        let named = sentinel
            .master_url(config.connect_timeout, config.tls.as_ref())
            .await;
        match named {
            Ok(named) if named != url => {
                drop_connection(&slot, &ours, &url, &named);
                return;
            }
            _ => tokio::time::sleep(LEAST_GAP).await,
        }
    }
}

/// Drops `ours` from `slot` (only the connection this task watches: a
/// reconnect in between already follows the sentinels).
fn drop_connection(slot: &Weak<ArcSwapOption<Live>>, ours: &Weak<Live>, url: &str, named: &str) {
    let (Some(slot), Some(live)) = (slot.upgrade(), ours.upgrade()) else {
        return;
    };
    tracing::warn!(
        connected = %mask(url),
        named = %mask(named),
        "the sentinels name another master: dropping the connection to the old one"
    );
    let current = slot.load();
    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &live)) {
        slot.compare_and_swap(&current, None);
    }
}

fn is_current(slot: &ArcSwapOption<Live>, live: &Arc<Live>) -> bool {
    slot.load().as_ref().is_some_and(|c| Arc::ptr_eq(c, live))
}

/// One listener per sentinel on its `+switch-master` channel, poking
/// `switched` when it names this master; each dials again after a recheck
/// period when its sentinel goes away.
fn listen(sentinel: &Sentinel, config: &RedisConfig, switched: &Arc<Notify>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for url in sentinel.sentinel_urls() {
        let (master, config, switched) =
            (sentinel.master.clone(), config.clone(), switched.clone());
        set.spawn(async move {
            loop {
                let _ = announcements(&url, &master, &config, &switched).await;
                tokio::time::sleep(config.sentinel_recheck).await;
            }
        });
    }
    set
}

/// Subscribes to one sentinel's failover announcements until it goes away.
async fn announcements(
    url: &str,
    master: &str,
    config: &RedisConfig,
    switched: &Notify,
) -> Result<(), redis::RedisError> {
    let client = pool::client(url, config.tls.as_ref())
        .map_err(|e| redis::RedisError::from((redis::ErrorKind::Io, "sentinel", e.to_string())))?;
    let dial = tokio::time::timeout(config.connect_timeout, client.get_async_pubsub());
    let Ok(pubsub) = dial.await else {
        return Ok(());
    };
    let mut pubsub = pubsub?;
    pubsub.subscribe("+switch-master").await?;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        // "<master name> <old ip> <old port> <new ip> <new port>"
        let payload: String = msg.get_payload().unwrap_or_default();
        if payload.split(' ').next() == Some(master) {
            switched.notify_one();
        }
    }
    Ok(())
}
