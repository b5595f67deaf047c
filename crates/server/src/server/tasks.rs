//! The background tasks of a running sluice, in one task set that obeys the
//! shutdown token: the sweeper, the console's sampler, statsd, the store's
//! prober, the rule watcher and the xDS client (and the TLS watcher, added
//! by the gRPC listener).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ServeOptions;
use super::prune::Prune;
use crate::application::App;
use crate::config::{watch, xds};
use crate::console::{self, Console};
use crate::limiter::Now;
use crate::statsd;

/// Spawns every background task into one set; close and wait on it after
/// the servers have drained.
pub(super) fn spawn(
    app: &App,
    opts: &ServeOptions,
    console: &Arc<Console>,
    token: &CancellationToken,
) -> TaskTracker {
    let tasks = TaskTracker::new();
    tasks.spawn(sweep(app.clone(), token.clone()));
    tasks.spawn(console::run(console.clone(), app.clone(), token.clone()));
    if let Some(cfg) = opts.statsd.clone() {
        tasks.spawn(statsd::run(cfg, app.metrics.clone(), token.clone()));
    }
    if let Some(prober) = app.store.clone().background(token.clone()) {
        tasks.spawn(prober);
    }
    // Under xDS the files watched are --xds-overlay's, when it is given.
    let watch_files = opts.watch_config && !app.rules.dir().as_os_str().is_empty();
    let mut watch = watch::Watch::start(app.rules.clone(), watch_files);
    if let Some(tls) = &opts.tls {
        watch = watch.refreshing(tls.clone());
    }
    tasks.spawn(watch.run(token.clone()));
    if let Some(cfg) = opts.xds.clone() {
        tasks.spawn(xds::run(cfg, app.rules.clone(), token.clone()));
    }
    tasks
}

/// The reference's stats as Prometheus on their own listener, when bound.
pub(super) fn reference_metrics(
    tasks: &TaskTracker,
    served: Option<(
        tokio::net::TcpListener,
        Arc<crate::reference_metrics::Mapper>,
    )>,
    app: &App,
    opts: &ServeOptions,
    token: &CancellationToken,
) {
    if let Some((listener, mapper)) = served {
        tasks.spawn(crate::reference_metrics::serve(
            listener,
            app.metrics.clone(),
            mapper,
            opts.admin.clone(),
            token.clone(),
        ));
    }
}

/// Frees ended windows once a second so memory follows live keys, drops
/// the metric series of rules no longer in force, and publishes how many
/// counters live in memory. The work walks every live counter and, when
/// [`Prune`] says, every rule (a million take tens of milliseconds): it
/// runs on a blocking thread, so no request queued on a runtime worker
/// waits for it.
async fn sweep(app: App, token: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut prune = Prune::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = token.cancelled() => return,
        }
        let prune = prune.due(app.rules.status().generation, crate::config::retired());
        let app = app.clone();
        let work = tokio::task::spawn_blocking(move || {
            app.store.sweep(Now::wall());
            let c = app.store.counters();
            app.metrics.counters(c.live, c.evictions);
            if prune {
                app.metrics.prune_rules();
            }
        });
        tokio::select! {
            _ = work => {}
            () = token.cancelled() => return,
        }
    }
}
