//! The stream's lifecycle on tokio's paused clock: every case that was
//! covered only by process-level tests that slept.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::*;

const TTL: Duration = Duration::from_secs(15);
const ABANDON: Duration = Duration::from_secs(300);
const UNKNOWN: f64 = -1.0;

fn key(v: &str) -> Key {
    vec![("name".to_owned(), v.to_owned())]
}

/// A report's count over whole seconds, as Envoy 1.40 sends it.
fn whole(requests: u64, seconds: f64) -> Option<Measured> {
    Some(Measured {
        requests,
        seconds,
        whole_seconds: true,
    })
}

fn state_with(keys: &[&str]) -> State<u32> {
    let mut s = State::new(1);
    s.domain("d").expect("binds");
    for (i, k) in keys.iter().enumerate() {
        s.insert(
            key(k),
            u32::try_from(i).unwrap_or_default(),
            UNKNOWN,
            Instant::now(),
        );
    }
    s
}

#[test]
fn the_first_report_binds_the_domain_and_others_end_the_stream() {
    let mut s: State<()> = State::new(1);
    assert!(
        s.domain("").is_err(),
        "the first report must name the domain"
    );
    assert_eq!(s.domain("shop"), Ok("shop".to_owned()));
    assert_eq!(s.domain("shop"), Ok("shop".to_owned()));
    let err = s.domain("other").expect_err("another domain");
    assert!(err.contains("'shop'") && err.contains("'other'"), "{err}");
    assert!(s.domain("other").is_err(), "still bound to the first");
}

/// rlqs.proto: the domain "should only be provided in the first report; all
/// subsequent messages on the same stream are considered to be in the same
/// domain". A later report that leaves it out is in the bound domain.
#[test]
fn a_later_report_may_leave_the_domain_out() {
    let mut s: State<()> = State::new(1);
    assert_eq!(s.domain("shop"), Ok("shop".to_owned()));
    assert_eq!(s.domain(""), Ok("shop".to_owned()));
    assert_eq!(s.domain("shop"), Ok("shop".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_bucket_not_reported_for_three_ttls_is_gone() {
    let mut s = state_with(&["a", "b"]);
    advance(TTL * 3).await;
    // "b" is still reported; "a" is at exactly three TTLs: not yet.
    s.report(&key("b"), true, None, Instant::now());
    assert!(s.expire(Instant::now(), TTL, ABANDON).is_empty());
    advance(Duration::from_millis(1)).await;
    let ended = s.expire(Instant::now(), TTL, ABANDON);
    assert_eq!(ended.len(), 1);
    assert_eq!((&ended[0].0, ended[0].2), (&key("a"), Ending::Gone));
    assert!(s.knows(&key("b")) && !s.knows(&key("a")));
}

#[tokio::test(start_paused = true)]
async fn a_bucket_reported_idle_past_abandon_after_is_abandoned() {
    let mut s = state_with(&["idle", "busy"]);
    let step = Duration::from_secs(5);
    let mut waited = Duration::ZERO;
    while waited <= ABANDON {
        advance(step).await;
        waited += step;
        let now = Instant::now();
        // Envoy reports both every 5 s; only one carries requests.
        s.report(&key("idle"), false, None, now);
        s.report(&key("busy"), true, whole(15, 5.0), now);
        let ended = s.expire(now, TTL, ABANDON);
        if waited <= ABANDON {
            assert!(
                ended.is_empty(),
                "nothing ends before {ABANDON:?} ({waited:?})"
            );
        } else {
            assert_eq!(ended.len(), 1, "at {waited:?}");
            assert_eq!((&ended[0].0, ended[0].2), (&key("idle"), Ending::Abandoned));
        }
    }
    assert!(s.knows(&key("busy")));
    // 3 per second measured: claimed with the margin a few reports leave.
    let b = &s.buckets[&key("busy")];
    assert!(
        (b.estimate.rate() - 3.0).abs() < 1e-9,
        "{}",
        b.estimate.rate()
    );
    assert!(b.demand > 3.0 && b.demand < 4.5, "{}", b.demand);
}

#[tokio::test(start_paused = true)]
async fn gone_comes_before_abandoned() {
    let mut s = state_with(&["a"]);
    advance(ABANDON + TTL * 3 + Duration::from_secs(1)).await;
    let ended = s.expire(Instant::now(), TTL, ABANDON);
    assert_eq!(
        ended.iter().map(|e| e.2).collect::<Vec<_>>(),
        [Ending::Gone]
    );
}

#[test]
fn a_reload_rebinds_every_bucket_and_drops_what_envoy_holds() {
    let mut s = state_with(&["a", "b"]);
    for b in s.buckets.values_mut() {
        b.held = Some(Assignment::DenyAll);
    }
    let mut seen = Vec::new();
    assert!(
        !s.reload(1, |_, k, _, _| seen.push(k.clone())),
        "same generation"
    );
    assert!(seen.is_empty());
    assert!(s.reload(2, |domain, k, held, shell| {
        assert_eq!(domain, "d");
        assert_eq!(held, Some(&Assignment::DenyAll), "told what Envoy held");
        *shell += 10;
        seen.push(k.clone());
    }));
    seen.sort();
    assert_eq!(seen, [key("a"), key("b")]);
    assert!(
        s.buckets
            .values()
            .all(|b| b.held.is_none() && b.shell >= 10)
    );
    assert!(!s.reload(2, |_, _, _, _| unreachable!("once per generation")));

    // Before any report named a domain there is nothing to rebind.
    let mut fresh: State<()> = State::new(1);
    assert!(fresh.reload(2, |_, _, _, _| unreachable!("no buckets")));
}

#[tokio::test(start_paused = true)]
async fn renewals_go_to_the_longest_unwritten_first() {
    let mut s = state_with(&["new", "old", "recent"]);
    let t0 = Instant::now();
    if let Some(b) = s.buckets.get_mut(&key("old")) {
        b.written = Some(t0);
    }
    advance(Duration::from_secs(2)).await;
    if let Some(b) = s.buckets.get_mut(&key("recent")) {
        b.written = Some(Instant::now());
    }
    assert_eq!(s.renewal_order(), [key("new"), key("old"), key("recent")]);
}

#[test]
fn the_farewell_renews_only_what_envoy_holds() {
    let mut s = state_with(&["held", "never"]);
    if let Some(b) = s.buckets.get_mut(&key("held")) {
        b.held = Some(Assignment::AllowAll);
    }
    let renewed = s.farewell();
    assert_eq!(renewed, [(&key("held"), Assignment::AllowAll)]);
    assert_eq!(s.drain().len(), 2);
    assert_eq!(s.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn whole_seconds_from_envoy_are_read_by_our_clock() {
    // Envoy says 4 s for reports 4.9 s apart: 3 requests each is 0.61/s,
    // not 0.75/s.
    let mut s = state_with(&["a"]);
    for _ in 0..20 {
        advance(Duration::from_millis(4900)).await;
        s.report(&key("a"), true, whole(3, 4.0), Instant::now());
    }
    let rate = s.buckets[&key("a")].estimate.rate();
    assert!((rate - 3.0 / 4.9).abs() < 1e-6, "{rate}");
    // A report long after the last one keeps Envoy's own figure.
    advance(Duration::from_secs(60)).await;
    s.report(&key("a"), true, whole(600, 5.0), Instant::now());
    let rate = s.buckets[&key("a")].estimate.rate();
    assert!(rate > 3.0 / 4.9 * 2.0, "{rate}");
}

/// A client that keeps `time_elapsed` to the nanosecond (Envoy's PR #46723)
/// is taken at its word, even where our clock would have read otherwise.
#[tokio::test(start_paused = true)]
async fn a_figure_with_nanoseconds_is_taken_at_its_word() {
    let mut s = state_with(&["a"]);
    for _ in 0..20 {
        advance(Duration::from_millis(4900)).await;
        let exact = Measured {
            requests: 3,
            seconds: 4.5,
            whole_seconds: false,
        };
        s.report(&key("a"), true, Some(exact), Instant::now());
    }
    let rate = s.buckets[&key("a")].estimate.rate();
    assert!((rate - 3.0 / 4.5).abs() < 1e-6, "{rate}");
}

/// A bucket reported at its own, longer `reporting_interval` (60 s, four
/// TTLs) is not gone between two reports; one that stops is, after three
/// of its intervals.
#[tokio::test(start_paused = true)]
async fn a_bucket_reported_at_its_own_long_interval_is_not_gone() {
    let mut s = state_with(&["slow"]);
    let every = Duration::from_secs(60);
    for _ in 0..3 {
        advance(every).await;
        s.report(&key("slow"), true, whole(60, 60.0), Instant::now());
        assert!(s.expire(Instant::now(), TTL, ABANDON).is_empty());
    }
    advance(every * 2).await;
    assert!(
        s.expire(Instant::now(), TTL, ABANDON).is_empty(),
        "two intervals"
    );
    advance(every + Duration::from_millis(1)).await;
    let ended = s.expire(Instant::now(), TTL, ABANDON);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].2, Ending::Gone);
}
