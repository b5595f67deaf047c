use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_budget_grants_a_second_at_most_and_refills_at_its_rate() {
    let now = Instant::now();
    let mut b = CallBudget::new(100, now);
    assert_eq!(b.take(1000, now), 100, "one second's worth at once");
    assert_eq!(b.take(10, now), 0);
    let later = now + Duration::from_millis(250);
    assert_eq!(b.take(1000, later), 25);
    // Idle for a minute: still one second's worth, not sixty.
    let much_later = later + Duration::from_secs(60);
    assert_eq!(b.take(1000, much_later), 100);
    b.give_back(7);
    assert_eq!(b.take(1000, much_later), 7);
}

#[tokio::test(start_paused = true)]
async fn the_instance_budget_caps_every_stream_and_returns_what_it_refuses() {
    let shared = SharedBudget::new(150);
    let now = Instant::now();
    let (mut a, mut b) = (CallBudget::new(100, now), CallBudget::new(100, now));
    assert_eq!(shared.grant(&mut a, 1000, 100), 100);
    assert_eq!(
        shared.grant(&mut b, 1000, 100),
        50,
        "the instance has 50 left"
    );
    // b was refused 50 by the instance, not by its own budget.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(shared.grant(&mut b, 1000, 100), 100);
    // Its fair share lowered to 30: what it saved above that is gone.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(shared.grant(&mut b, 1000, 30), 30);
    assert_eq!(CallBudget::new(0, now).take(5, now), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stream_saves_a_report_intervals_worth() {
    // An even share of 2 calls a second: a report of 10 buckets every
    // 5 s is afforded whole, and no more is saved past that.
    let now = Instant::now();
    let mut b = CallBudget::saving(2, STREAM_SAVES, now);
    assert_eq!(b.take(10, now), 10);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(b.take(10, Instant::now()), 10);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(b.take(100, Instant::now()), 10);
}

#[test]
fn a_stream_gets_its_cap_or_its_even_share_of_the_instance() {
    assert_eq!(fair_rate(200, 2000, 1), 200);
    assert_eq!(fair_rate(200, 2000, 10), 200);
    assert_eq!(fair_rate(200, 2000, 40), 50);
    // A thousand streams: each may still make one call a second.
    assert_eq!(fair_rate(200, 80, 1000), 1);
    assert_eq!(fair_rate(200, 2000, 0), 200);
}
