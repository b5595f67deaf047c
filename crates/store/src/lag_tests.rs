use super::*;

#[tokio::test(start_paused = true)]
async fn lateness_is_kept_for_a_window_or_two_then_forgotten() {
    let lag = Lag::new();
    assert_eq!(lag.recent(), Duration::ZERO);
    lag.record(Duration::from_millis(40));
    lag.record(Duration::from_millis(3));
    assert_eq!(lag.recent(), Duration::from_millis(40), "the worst is kept");
    // Into the next window: still remembered (as the previous one).
    tokio::time::advance(Duration::from_millis(WINDOW_MS)).await;
    lag.record(Duration::ZERO);
    assert_eq!(lag.recent(), Duration::from_millis(40));
    // Two windows on: forgotten.
    tokio::time::advance(Duration::from_millis(WINDOW_MS)).await;
    lag.record(Duration::ZERO);
    assert_eq!(lag.recent(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_lateness_still_under_way_counts_before_it_is_recorded() {
    let lag = Lag::new();
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(lag.late_now(), Duration::ZERO, "not ticking yet: no claim");
    lag.woke.store(lag.since_base_us() + 1, Relaxed);
    assert_eq!(lag.late_now(), Duration::ZERO);
    // The ticker has not woken for 45 ms: 40 ms past its tick, though
    // it has recorded nothing yet.
    tokio::time::advance(Duration::from_millis(45)).await;
    assert_eq!(lag.recent(), Duration::ZERO);
    assert_eq!(lag.late_now(), Duration::from_millis(40));
    // Once it runs, it records that lateness and is on time again.
    lag.woke.store(lag.since_base_us() + 1, Relaxed);
    lag.record(Duration::from_millis(40));
    assert_eq!(
        lag.late_now(),
        Duration::from_millis(40),
        "the recent worst"
    );
}

#[tokio::test(start_paused = true)]
async fn a_runtime_on_time_shows_no_lag() {
    let lag = std::sync::Arc::new(Lag::new());
    let token = CancellationToken::new();
    let watcher = tokio::spawn({
        let (lag, token) = (lag.clone(), token.clone());
        async move { lag.watch(token).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(lag.recent(), Duration::ZERO);
    assert!(lag.late_now() <= TICK, "{:?}", lag.late_now());
    token.cancel();
    let _ = watcher.await;
}
