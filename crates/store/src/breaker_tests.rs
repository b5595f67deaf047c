use super::*;

#[tokio::test(start_paused = true)]
async fn trips_after_consecutive_faults_only() {
    let mut b = Breaker::new();
    assert!(b.is_open());
    assert_eq!(b.next_delay(), Duration::ZERO, "first connect at once");
    b.close(Instant::now());
    for _ in 0..TRIP_AFTER - 1 {
        assert_eq!(b.fault(Instant::now()), Verdict::Same);
    }
    b.success();
    for _ in 0..TRIP_AFTER - 1 {
        assert_eq!(b.fault(Instant::now()), Verdict::Same);
    }
    assert_eq!(b.fault(Instant::now()), Verdict::Tripped);
    assert!(b.is_open());
    assert_eq!(b.fault(Instant::now()), Verdict::Same, "already open");
    assert_eq!(b.trips(), 1);
}

#[tokio::test(start_paused = true)]
async fn probes_back_off_to_a_cap() {
    let mut b = Breaker::new();
    b.next_delay();
    tokio::time::advance(STABLE * 2).await;
    b.close(Instant::now() - STABLE * 2);
    for _ in 0..TRIP_AFTER {
        b.fault(Instant::now());
    }
    let delays: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
    assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
}

#[tokio::test(start_paused = true)]
async fn a_flapping_store_is_probed_ever_more_slowly() {
    let mut b = Breaker::new();
    b.next_delay();
    let mut starts = Vec::new();
    for _ in 0..8 {
        // Taken back, then failing again at once: a flap.
        b.close(Instant::now());
        tokio::time::advance(Duration::from_millis(10)).await;
        for _ in 0..TRIP_AFTER {
            b.fault(Instant::now());
        }
        starts.push(b.next_delay().as_millis());
    }
    assert_eq!(starts, [100, 200, 400, 800, 1600, 3200, 6400, 12800]);
    for _ in 0..4 {
        b.close(Instant::now());
        for _ in 0..TRIP_AFTER {
            b.fault(Instant::now());
        }
    }
    assert_eq!(b.next_delay(), FLAP_MAX);
    assert_eq!(b.next_delay(), FLAP_MAX, "stays at the cap while open");
    // Stable for a while: the next outage starts quick again.
    b.close(Instant::now());
    tokio::time::advance(STABLE).await;
    for _ in 0..TRIP_AFTER {
        b.fault(Instant::now());
    }
    assert_eq!(b.next_delay(), PROBE_FIRST);
}
