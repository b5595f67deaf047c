use super::*;
use std::time::Duration;

#[test]
fn a_reading_anchors_the_clock_to_the_store_within_its_round_trip() {
    let clock = Anchor::new();
    assert_eq!(clock.offset_ms(), 0, "unanchored: the host's clock");
    let sent = Instant::now();
    let answered = sent + Duration::from_millis(4);
    // A store an hour ahead of this host, read over a 4 ms round trip.
    let store = host_us() + 3_600_000_000;
    clock.follow(store, sent, answered);
    let got = clock.now_us();
    assert!(
        got >= store - 3_000 && got < store + 1_000_000,
        "{got} vs {store}"
    );
    assert_eq!(clock.uncertainty_us.load(Relaxed), 2_000);
    assert!(
        (clock.offset_ms() - 3_600_000).abs() < 1_000,
        "{}",
        clock.offset_ms()
    );
}

/// A reading over a slow round trip that agrees with the anchor held
/// keeps it (and its small error); one that disagrees is taken.
#[test]
fn a_slow_reading_keeps_the_better_anchor_unless_the_store_moved() {
    let clock = Anchor::new();
    let sent = Instant::now();
    let store = host_us();
    clock.follow(store, sent, sent + Duration::from_micros(400));
    let anchor = clock.at_origin_us.load(Relaxed);
    // 20 ms later, read over a 30 ms round trip, 10 ms off the truth.
    let later = sent + Duration::from_millis(20);
    clock.follow(
        store + 20_000 + 10_000,
        later,
        later + Duration::from_millis(30),
    );
    assert_eq!(clock.at_origin_us.load(Relaxed), anchor, "kept");
    let held = clock.uncertainty_us.load(Relaxed);
    assert!((200..300).contains(&held), "aged, not widened: {held}");
    // The store's clock stepped a second: the readings disagree.
    clock.follow(
        store + 40_000 + 1_000_000,
        later,
        later + Duration::from_millis(30),
    );
    assert_ne!(clock.at_origin_us.load(Relaxed), anchor, "taken");
    assert_eq!(clock.uncertainty_us.load(Relaxed), 15_000);
}

/// A process's first reading is taken before anything fixed the clock's
/// origin (the origin is fixed by the reading itself, after its answer,
/// and after the readings taken beside it to keep the best): the reading
/// is still placed at its own middle, so the clock is within the
/// reading's uncertainty of the store's, not behind it by however long
/// the origin came after. (It was placed at the origin: a restarted
/// instance ran behind the store by its start-up's delays, past the guard
/// of its over-limit cache, and refused a new window's first requests
/// from the last window's refusal.)
#[test]
fn a_first_reading_older_than_the_origin_is_placed_at_its_middle() {
    let clock = Anchor::new();
    let Some(sent) = Instant::now().checked_sub(Duration::from_millis(30)) else {
        return;
    };
    let answered = sent + Duration::from_millis(2);
    // The store agrees with this host; it was read 29 ms ago.
    let store = host_us() - 29_000;
    clock.follow(store, sent, answered);
    let lo = host_us();
    let got = clock.now_us();
    let hi = host_us();
    let guard = clock.uncertainty_us.load(Relaxed) + 1_000;
    assert!(
        got + guard >= lo && got <= hi + guard,
        "{got} not within {guard} µs of [{lo}, {hi}]"
    );
}
