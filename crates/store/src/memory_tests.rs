//! The memory store's tests: counting, windows, eviction under floods and
//! the shapes' state.

use std::sync::Arc;

use super::*;
use crate::CounterKey;
use crate::limiter::Window;

fn inc(v: &str, now: u64) -> Increment {
    Increment::test_hit(v, 100, now * 1_000_000)
}

/// `i` at the clock reading `us`.
fn at_us(i: &Increment, us: u64) -> Increment {
    Increment {
        at_us: us,
        ..i.clone()
    }
}

fn counts(t: Vec<Tally>) -> Vec<u64> {
    t.into_iter()
        .map(|t| match t {
            Tally::Count(n) => n,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn bounded_and_a_flood_of_new_keys_does_not_reset_a_busy_counter() {
    let s = MemoryStore::with_capacity(SHARDS * 8);
    // A client that spent 30 of its 100 hits, then a flood of one-hit keys.
    for _ in 0..30 {
        s.count(&[inc("victim", 60)]);
    }
    for i in 0..100_000 {
        s.count(&[inc(&format!("flood{i}"), 60)]);
    }
    assert!(s.sweep(Now(60)) <= SHARDS * 8);
    assert!(s.stats().evictions >= 100_000 - (SHARDS * 8) as u64);
    assert_eq!(counts(s.count(&[inc("victim", 61)])), [31], "kept");
}

#[test]
fn over_limit_counters_outlive_busy_ones_when_full() {
    let s = MemoryStore::with_capacity(SHARDS * 8);
    let over = |v: &str| Increment {
        limit: 3,
        ..inc(v, 60)
    };
    for _ in 0..5 {
        s.count(&[over("blocked")]);
    }
    // Every other counter has more hits, but none is over its limit.
    for i in 0..2_000 {
        for _ in 0..10 {
            s.count(&[inc(&format!("busy{i}"), 60)]);
        }
    }
    assert_eq!(counts(s.count(&[over("blocked")])), [6]);
}

#[test]
fn ended_windows_make_room_before_anything_live_goes() {
    let s = MemoryStore::with_capacity(SHARDS);
    for i in 0..500 {
        s.count(&[inc(&format!("old{i}"), 60)]);
    }
    let before = s.stats().evictions;
    for _ in 0..3 {
        s.count(&[inc("new", 120)]);
    }
    assert_eq!(counts(s.count(&[inc("new", 121)])), [4]);
    assert_eq!(s.stats().evictions, before, "an ended window went instead");
}

#[test]
fn counts_per_key_and_restarts_each_window() {
    let s = MemoryStore::default();
    assert_eq!(
        counts(s.count(&[inc("a", 60), inc("a", 61), inc("b", 61)])),
        [1, 2, 1]
    );
    assert_eq!(counts(s.count(&[inc("a", 120)])), [1]);
}

fn shaped(v: &str, algorithm: Algorithm, now: u64) -> Increment {
    let period = crate::limiter::Period::Seconds(10);
    let space = crate::KeySpace { period, algorithm };
    Increment {
        key: CounterKey::new("d", space, [("k", v)]),
        window: Window::containing(period, Now(now)),
        algorithm,
        ..Increment::test_hit(v, 5, now * 1_000_000)
    }
}

#[test]
fn a_sliding_window_carries_the_previous_window_once() {
    let s = MemoryStore::default();
    let at = |now| shaped("a", Algorithm::SlidingWindow, now);
    for _ in 0..3 {
        s.count(&[at(100)]);
    }
    assert_eq!(
        s.count(&[at(111)]),
        [Tally::Sliding {
            current: 1,
            previous: 3
        }]
    );
    // Two windows on, nothing carries.
    assert_eq!(
        s.count(&[at(135)]),
        [Tally::Sliding {
            current: 1,
            previous: 0
        }]
    );
    // Kept through the next window, then swept.
    assert_eq!(s.sweep(Now(145)), 1);
    assert_eq!(s.sweep(Now(150)), 0);
}

#[test]
fn a_token_bucket_is_exact_and_refills() {
    let s = MemoryStore::default();
    let b = shaped("b", Algorithm::token_bucket(5, 10, 5), 100);
    let t0 = 100_000_000;
    let taken = (0..20)
        .filter(|_| {
            matches!(
                s.count(&[at_us(&b, t0)])[0],
                Tally::Bucket { taken: true, .. }
            )
        })
        .count();
    assert_eq!(taken, 5, "burst 5, nothing refilled yet");
    // 5 per 10 s: one token every 2 s.
    assert!(matches!(
        s.count(&[at_us(&b, t0 + 1_999_999)])[0],
        Tally::Bucket { taken: false, .. }
    ));
    assert!(matches!(
        s.count(&[at_us(&b, t0 + 2_000_000)])[0],
        Tally::Bucket { taken: true, .. }
    ));
    // A full bucket is the same as none: swept once full.
    assert_eq!(s.sweep(Now(113)), 0);
}

#[test]
fn sweep_frees_ended_windows() {
    let s = MemoryStore::default();
    s.count(&[inc("a", 60), inc("b", 60)]);
    assert_eq!(s.sweep(Now(119)), 2);
    assert_eq!(s.sweep(Now(120)), 0);
    assert!(s.is_empty());
}

#[test]
fn exact_under_concurrency() {
    let s = Arc::new(MemoryStore::default());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..1000)
                    .filter(|_| counts(s.count(&[inc("hot", 60)]))[0] <= 100)
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, 100);
}

/// The sliding window's worst case, measured on the memory store with a
/// simulated clock: a whole budget in the last instant of one window, then a
/// client that tries every 10 ms but, once refused, waits its Retry-After
/// (refused requests count, so a client that keeps hammering never gets in).
mod sliding_worst_case {
    use super::*;
    use crate::limiter::{Counted, Period, Status, Unit, Window, status};
    use crate::{CounterKey, KeySpace};

    #[test]
    fn over_any_span_it_admits_at_most_limit_times_one_plus_span_over_window() {
        let (limit, window_ms) = (100u32, 60_000u64);
        let s = MemoryStore::default();
        let space = KeySpace {
            period: Period::Unit(Unit::Minute),
            algorithm: Algorithm::SlidingWindow,
        };
        let key = CounterKey::new("d", space, [("k", "v")]);
        let mut admitted_at = Vec::new();
        let mut quiet_until = 0;
        // From 59.99 s: the burst; then every 10 ms for two windows.
        let start_ms = 60_000 * 1_000 - 10;
        for step in 0..12_000u64 {
            let now_ms = start_ms + step * 10;
            let tries = if step == 0 { 100 } else { 1 };
            if now_ms < quiet_until {
                continue;
            }
            for _ in 0..tries {
                let st = hit(&s, &key, limit, now_ms);
                if st.over {
                    quiet_until = now_ms + st.retry_seconds * 1000;
                } else {
                    admitted_at.push(now_ms);
                }
            }
        }
        // The worst span of one window, and of a tenth of one.
        let whole = most_in(&admitted_at, window_ms);
        let tenth = most_in(&admitted_at, window_ms / 10);
        eprintln!("sliding window of 100/min, worst case: {whole} in 60 s, {tenth} in 6 s");
        assert!(whole <= 200, "{whole}");
        assert!(whole > 150, "the worst case is real: {whole}");
        assert!(tenth <= 110 + 1, "{tenth}");
    }

    /// One hit on a sliding window of `limit` a minute at `now_ms`: its status.
    fn hit(s: &MemoryStore, key: &CounterKey, limit: u32, now_ms: u64) -> Status {
        let now = Now(now_ms / 1000);
        let window = Window::containing(Period::Unit(Unit::Minute), now);
        let inc = Increment {
            key: key.clone(),
            window,
            algorithm: Algorithm::SlidingWindow,
            ..Increment::test_hit("", limit, now_ms * 1000)
        };
        let tally = s.count(std::slice::from_ref(&inc))[0];
        let counted = Counted {
            requests_per_unit: limit,
            window,
            algorithm: Algorithm::SlidingWindow,
            hits: 1,
            tally,
            elapsed_ms: now_ms - window.start.0 * 1000,
            shadow: false,
            quota: false,
            near_ratio: crate::limiter::NEAR_LIMIT_RATIO,
        };
        status(&counted, now)
    }

    /// The most of `times` (ms) inside any span of `span` ms.
    fn most_in(times: &[u64], span: u64) -> usize {
        times
            .iter()
            .map(|t| times.iter().filter(|u| **u >= *t && **u < t + span).count())
            .max()
            .unwrap_or(0)
    }
}

#[test]
fn a_token_bucket_reports_the_tokens_its_key_took_in_the_window() {
    let s = MemoryStore::default();
    // 5 per 10 s (a token every 2 s) in a bucket of 1.
    let b = |now| shaped("b", Algorithm::token_bucket(5, 10, 1), now);
    let ask = |i: &Increment, us: u64| match s.count(&[at_us(i, us)])[0] {
        Tally::Bucket { taken, asked, .. } => (taken, asked),
        other => panic!("{other:?}"),
    };
    // Refilled between the first two: the bucket is as full each time,
    // yet the key has taken 1, then 2; a refused request counts nothing.
    assert_eq!(ask(&b(100), 100_000_000), (true, Some(1)));
    assert_eq!(ask(&b(100), 103_000_000), (true, Some(2)));
    assert_eq!(ask(&b(100), 103_000_001), (false, None));
    // Where the usage is the whole demand (shadow mode), refused hits count.
    let demand = Increment {
        usage_counts_refused: true,
        ..b(100)
    };
    assert_eq!(ask(&demand, 103_000_002), (false, Some(3)));
    // A refund lowers it; a new window starts again.
    let refund = Increment {
        refund: true,
        ..b(100)
    };
    assert_eq!(ask(&refund, 104_000_000), (true, Some(2)));
    assert_eq!(ask(&b(110), 110_000_000), (true, Some(1)));
    // Kept while its window's usage counts, though the bucket is full.
    assert_eq!(s.sweep(Now(119)), 1);
    assert_eq!(s.sweep(Now(120)), 0);
}

#[test]
fn a_concurrency_take_reports_the_most_its_key_held_before_in_the_window() {
    let s = MemoryStore::default();
    let slot = |id: &str, now: u64, refund: bool| Increment {
        slot: Some(id.into()),
        refund,
        ..shaped("c", Algorithm::Concurrency, now)
    };
    let take = |i: Increment| match s.count(&[i])[0] {
        Tally::Slots { held, peak } => (held, peak),
        other => panic!("{other:?}"),
    };
    assert_eq!(take(slot("a", 100, false)), (1, Some(0)));
    // A release reports no peak, and its counter outlives its last slot
    // through the window, so taking one again is no new peak.
    assert_eq!(take(slot("a", 101, true)), (0, None));
    s.sweep(Now(102));
    assert_eq!(take(slot("b", 102, false)), (1, Some(1)));
    assert_eq!(take(slot("c", 103, false)), (2, Some(1)));
    assert_eq!(take(slot("d", 104, false)), (3, Some(2)));
    // A look takes nothing and reports no peak.
    let look = Increment {
        hits: 0,
        ..slot("e", 104, false)
    };
    assert_eq!(take(look), (3, None));
    // The next window's peak starts again.
    assert_eq!(take(slot("e", 110, false)), (4, Some(0)));
}
