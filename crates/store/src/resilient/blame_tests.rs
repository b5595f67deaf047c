use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::resilient::tests::{Fake, Mode, connected, inc, net};
use crate::{FailurePolicy, Store, StoreError};

const ZERO: Duration = Duration::ZERO;

fn never(_: Duration) -> bool {
    false
}

#[tokio::test(start_paused = true)]
async fn evidence_against_the_store_is_enough() {
    let s = Silence::new();
    assert_eq!(s.ran_out(false, ZERO, |_| true), Blame::Store);
}

#[tokio::test(start_paused = true)]
async fn sluices_lateness_is_believed_until_the_store_has_been_silent_too_long() {
    let s = Silence::new();
    assert_eq!(s.ran_out(true, ZERO, never), Blame::Sluice);
    tokio::time::advance(SILENCE_BOUND - Duration::from_millis(1)).await;
    assert_eq!(s.ran_out(true, ZERO, never), Blame::Sluice);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        s.ran_out(true, ZERO, never),
        Blame::Store,
        "silent for the bound"
    );
    assert_eq!(
        s.ran_out(true, ZERO, never),
        Blame::Store,
        "and while it stays silent"
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_ends_the_silence() {
    let s = Silence::new();
    assert_eq!(s.ran_out(true, ZERO, never), Blame::Sluice);
    tokio::time::advance(SILENCE_BOUND * 2).await;
    s.answered();
    assert_eq!(
        s.ran_out(true, ZERO, never),
        Blame::Sluice,
        "it answered: ours again"
    );
    tokio::time::advance(SILENCE_BOUND / 2).await;
    assert_eq!(s.ran_out(true, ZERO, never), Blame::Sluice);
    tokio::time::advance(SILENCE_BOUND / 2).await;
    assert_eq!(s.ran_out(true, ZERO, never), Blame::Store);
}

/// Found by the fault harness's request flood on a Cluster: every
/// request's wait ran out, on a host too loaded to read replies in
/// time, while the store answered them all; a second of that was taken
/// for silence and tripped the breaker.
#[tokio::test(start_paused = true)]
async fn a_store_heard_answering_during_the_silence_is_not_silent() {
    let s = Silence::new();
    let last_answer = std::cell::Cell::new(Instant::now());
    let heard = |d: Duration| last_answer.get().elapsed() < d;
    assert_eq!(s.ran_out(true, ZERO, heard), Blame::Sluice);
    for _ in 0..30 {
        tokio::time::advance(SILENCE_BOUND / 10).await;
        last_answer.set(Instant::now() - Duration::from_millis(50));
        assert_eq!(
            s.ran_out(true, ZERO, heard),
            Blame::Sluice,
            "answering, late"
        );
    }
    // Then it answers nothing at all: found silent within the bound.
    tokio::time::advance(SILENCE_BOUND / 2).await;
    assert_eq!(s.ran_out(true, ZERO, heard), Blame::Sluice);
    tokio::time::advance(SILENCE_BOUND / 2).await;
    assert_eq!(
        s.ran_out(true, ZERO, heard),
        Blame::Store,
        "silent for the bound"
    );
}

/// A safety net on a fake store, connected, whose calls then go `mode`
/// and which says `stalled` of them.
async fn connected_then(
    mode: Mode,
    stalled: bool,
) -> (Arc<Fake>, Arc<Resilient>, CancellationToken) {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    *fake.mode.lock().unwrap() = mode;
    *fake.stalled.lock().unwrap() = Some(stalled);
    (fake, r, token)
}

/// A trip's reason says what the store's clocks said: how long it was
/// silent and how late its replies were read, so an operator can tell a
/// store gone from one silent just past [`QUIET`](super::QUIET).
#[tokio::test(start_paused = true)]
async fn a_timeout_trip_says_how_long_the_store_was_silent() {
    let (_fake, r, token) = connected_then(Mode::Hang, true).await;
    while r.health().healthy {
        r.increment(&[inc("a")]).await.unwrap();
    }
    let detail = r.health().detail.unwrap_or_default();
    assert!(
        detail.contains("no answer within 20 ms (the store silent 140 ms, its replies read 3 ms late, the workers"),
        "{detail}"
    );
    token.cancel();
}

/// Found by the fault harness's request flood on memcached: a process
/// starved past a pool's checkout timeout polls that timer before the
/// request's own, and a checkout that waited for connections others held
/// was a store fault; a few in a row tripped the breaker. It is a wait
/// that ran out, judged like any other.
#[tokio::test(start_paused = true)]
async fn a_wait_inside_the_call_that_ran_out_is_judged_like_any_other() {
    let (fake, r, token) = connected_then(Mode::TimesOut, false).await;
    for _ in 0..40 {
        let e = r.increment(&[inc("a")]).await.unwrap_err();
        assert!(matches!(e, StoreError::Busy(_)), "{e}");
    }
    assert!(r.health().healthy, "no trip without evidence of the store");
    *fake.stalled.lock().unwrap() = Some(true);
    while r.health().healthy {
        r.increment(&[inc("a")]).await.unwrap();
    }
    token.cancel();
}

/// Found by the fault harness's request flood on memcached: the workers
/// that read its answers ran 1.2 s late, so nothing was heard for 1.2 s
/// while it answered every call; that was taken for silence. Silence the
/// reader's lateness explains is not the store's; past it, it is.
#[tokio::test(start_paused = true)]
async fn silence_the_readers_lateness_explains_is_not_the_stores() {
    let s = Silence::new();
    let late = SILENCE_BOUND / 2;
    assert_eq!(s.ran_out(true, late, never), Blame::Sluice);
    tokio::time::advance(SILENCE_BOUND + late / 2).await;
    assert_eq!(s.ran_out(true, late, never), Blame::Sluice, "read late");
    tokio::time::advance(late).await;
    assert_eq!(s.ran_out(true, late, never), Blame::Store, "past it");
}
