//! Quota at fleet scale: streams share their fleet reads, a flood of buckets stays within the store's budgets, the bucket cap, and a started instance learning the fleet.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_one_instance_share_their_fleet_reads() {
    let redis = RedisServer::start();
    // A store timeout a starved Redis always meets: with 20 ms, a loaded
    // machine's Redis is rightly found slow, the breaker opens and its
    // probes (the same script) add calls this count is not about.
    let args = ["--redis-url", &redis.url(), "--redis-timeout", "1s"];
    let sluice = Sluice::start(&[("api.yaml", RULES)], &args);
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut s = open(&sluice).await.unwrap();
        s.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
        s.next().await;
        streams.push(s);
    }
    let calls = || redis.calls("evalsha") + redis.calls("eval");
    let before = calls();
    // The measurement is a span of time: three rebalance ticks of four
    // streams on one bucket. Each reading the store would be 12 calls.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = calls() - before;
    eprintln!("{made} store calls for 4 streams over 3 ticks");
    assert!(made <= 6, "{made} store calls for 4 streams over 3 ticks");
}

/// One client naming a thousand buckets must not turn its reports into a
/// thousand store calls a second: its own budget and the instance's bound
/// what quota mode asks of the store, and another Envoy still gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_buckets_costs_the_store_no_more_than_its_budgets() {
    let redis = RedisServer::start();
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &[
            "--redis-url",
            &redis.url(),
            "--quota-stream-store-rate",
            "50",
            "--quota-store-rate",
            "80",
        ],
    );
    assert!(eventually(
        Duration::from_secs(10),
        || sluice.readyz()["status"] == "ready"
    ));
    let calls = || redis.calls_ok("evalsha") + redis.calls_ok("eval");
    let before = calls();
    let started = std::time::Instant::now();
    let keys: Vec<String> = (0..1000).map(|i| format!("flood-{i}")).collect();
    let mut flood = open(&sluice).await.unwrap();
    flood
        .report(
            "api",
            keys.iter()
                .map(|k| usage(&[("tier", "partner"), ("api_key", k)], 100, 0, 1))
                .collect(),
        )
        .await;
    let first = flood.next().await;
    // The stream saves five seconds of its 50 a second, the instance one
    // second of its 80: the instance's is what one report can spend.
    assert!(
        first.len() <= 80,
        "one report was answered with {} assignments, each a store call",
        first.len()
    );
    an_honest_envoy_gets_its_share(&sluice).await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    let made = calls() - before;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{made} store calls in {seconds:.1} s");
    // The instance's budget: 80 a second, one second's worth saved up.
    assert!(
        (made as f64) <= 80.0 * (seconds + 1.0),
        "{made} store calls in {seconds:.1} s with --quota-store-rate 80"
    );
    let deferred = metric(
        &sluice.get("/metrics").1,
        "sluice_quota_store_calls_deferred_total",
    );
    assert!(
        deferred.is_some_and(|d| d > 0.0),
        "deferred calls are counted"
    );
}

/// An honest Envoy reporting meanwhile is still assigned its share.
async fn an_honest_envoy_gets_its_share(sluice: &Sluice) {
    // An honest Envoy reporting meanwhile is still assigned its share.
    let mut honest = open(sluice).await.unwrap();
    honest.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let mut got = HashMap::new();
    while !got.contains_key("k1") {
        got = honest.next().await;
    }
    assert!(got["k1"].contains("/10s"), "honest Envoy got {got:?}");
}

/// Every bucket a stream holds costs memory and a little of each
/// rebalance; however many streams there are, the instance holds at most
/// `--quota-max-total-buckets`, and a stream that ends gives its back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_holds_no_more_buckets_than_its_cap() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &["--quota-max-total-buckets", "3"]);
    let partner = |k: &'static str| usage(&[("tier", "partner"), ("api_key", k)], 1, 0, 0);
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![partner("a1"), partner("a2")]).await;
    assert_eq!(a.next().await.len(), 2);
    let mut b = open(&sluice).await.unwrap();
    b.report("api", vec![partner("b1"), partner("b2")]).await;
    let got = b.next().await;
    assert!(got.contains_key("b1") && !got.contains_key("b2"), "{got:?}");
    let skipped = || {
        metric(
            &sluice.get("/metrics").1,
            "sluice_quota_reports_skipped_total{reason=\"too_many_buckets\"}",
        )
    };
    assert_eq!(skipped(), Some(1.0));
    // The first Envoy goes: its two places are free again.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // b1 is held, so every report is answered.
        b.report("api", vec![partner("b1"), partner("b2")]).await;
        if b.next().await.contains_key("b2") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "b2 never got a place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After a start, the instance learns what the fleet holds before it
/// assigns: two Envoys that report at once are told nothing until the
/// learning ends (so neither is handed the whole budget while it looks
/// alone), `/readyz` says so, and then each gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_instance_learns_the_fleet_before_it_assigns() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &["--quota-learning", "3s"]);
    let learning = sluice.readyz()["quota"]["learning_seconds_left"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(learning > 0.0, "{:?}", sluice.readyz());
    assert_eq!(
        metric(&sluice.get("/metrics").1, "sluice_quota_learning"),
        Some(1.0)
    );
    let mut a = open(&sluice).await.unwrap();
    a.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let mut b = open(&sluice).await.unwrap();
    b.report("api", vec![usage(PARTNER, 1, 0, 0)]).await;
    let early = tokio::time::timeout(Duration::from_millis(1500), a.rx.message()).await;
    assert!(early.is_err(), "assigned while learning: {early:?}");
    // Then both are sized for a fleet of two, never one.
    assert_eq!(a.next().await["k1"], "50/10s max 5");
    assert_eq!(b.next().await["k1"], "50/10s max 5");
    assert_eq!(
        sluice.readyz()["quota"]["learning_seconds_left"].as_f64(),
        Some(0.0)
    );
    assert_eq!(
        metric(&sluice.get("/metrics").1, "sluice_quota_learning"),
        Some(0.0)
    );
}
