use super::*;

const WAIT: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn a_call_unanswered_for_the_wait_is_a_stall() {
    let c = Calls::new();
    assert!(!c.stalled(WAIT), "nothing sent");
    let _ = c.sent();
    tokio::time::advance(WAIT / 2).await;
    assert!(!c.stalled(WAIT));
    tokio::time::advance(WAIT).await;
    assert!(c.stalled(WAIT));
}

#[tokio::test(start_paused = true)]
async fn a_store_answering_others_is_not_stalled() {
    let c = Calls::new();
    let _slow = c.sent();
    tokio::time::advance(WAIT * 2).await;
    let other = c.sent();
    let _ = other;
    c.answered();
    assert!(!c.stalled(WAIT), "it answered just now");
    tokio::time::advance(WAIT).await;
    assert!(c.stalled(WAIT), "and nothing since, with a call out");
}

#[tokio::test(start_paused = true)]
async fn a_call_given_up_on_stays_unanswered_until_the_store_answers() {
    let c = Calls::new();
    let sent = c.sent();
    tokio::time::advance(WAIT / 2).await;
    c.abandoned(sent);
    tokio::time::advance(WAIT).await;
    assert!(c.stalled(WAIT), "the store never answered it");
    let _ = c.sent();
    c.answered();
    assert!(!c.stalled(WAIT), "an answer clears it");
    tokio::time::advance(WAIT * 2).await;
    assert!(!c.stalled(WAIT), "nothing out");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_unanswered_is_abandoned() {
    let c = Calls::new();
    drop(c.call());
    tokio::time::advance(WAIT).await;
    assert!(c.stalled(WAIT));
    c.call().answered();
    assert!(!c.stalled(WAIT));
    assert_eq!(c.in_flight.load(Relaxed), 0);
    assert!(c.answered_within(WAIT));
    tokio::time::advance(WAIT).await;
    assert!(!c.answered_within(WAIT));
}

#[tokio::test(start_paused = true)]
async fn answers_to_given_up_calls_are_listened_for_within_the_limit() {
    let c = Arc::new(Calls::listening_for(2));
    let sent = c.sent();
    c.abandoned(sent);
    let (a, b) = (c.listen(), c.listen());
    assert!(a.is_some() && b.is_some());
    assert!(c.listen().is_none(), "past the limit");
    tokio::time::advance(WAIT * 2).await;
    assert!(c.stalled(WAIT), "nothing heard yet");
    if let Some(a) = a {
        a.heard();
    }
    assert!(!c.stalled(WAIT), "a late answer is an answer");
    assert_eq!(c.in_flight.load(Relaxed), 0, "counted out once");
    assert!(c.listen().is_some(), "its place is given back");
    assert!(
        Arc::new(Calls::new()).listen().is_none(),
        "none listened for"
    );
    drop(b);
}
