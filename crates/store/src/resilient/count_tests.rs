use std::sync::atomic::Ordering::Relaxed;

use tokio_util::sync::CancellationToken;

use super::super::tests::{Fake, Mode, connected, inc, net};
use crate::limiter::Tally;
use crate::{Answer, FailurePolicy, Increment, Store};

/// A batch this instance answers whole (a lease's positions) is answered
/// at once, with no future and no store call; one that must ask the
/// store is a call to wait for, and each step is taken once (the lease's
/// positions are spent in order, none twice, none skipped).
#[tokio::test(start_paused = true)]
async fn what_the_leases_hold_is_answered_at_once() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Deny);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    let hot = || Increment {
        leasable: true,
        limit: 1000,
        ..inc("hot")
    };
    // A plain count, then a take of 2: both ask the store.
    let one = [hot()];
    for want in [Tally::Count(1), Tally::Leased(2)] {
        let Answer::Later(asked) = r.answer(&one, None) else {
            panic!("{want:?} asks the store");
        };
        assert_eq!(asked.await.unwrap(), [want]);
    }
    let calls = fake.calls.load(Relaxed);
    let Answer::Now(now) = r.answer(&one, None) else {
        panic!("answered from the lease");
    };
    assert_eq!(now.unwrap(), [Tally::Leased(3)]);
    assert_eq!(fake.calls.load(Relaxed), calls, "the store was not asked");
    // A batch with one increment the lease cannot answer asks for it alone.
    let two = [hot(), inc("cold")];
    let Answer::Later(asked) = r.answer(&two, None) else {
        panic!("the cold key asks the store");
    };
    let got = asked.await.unwrap();
    assert_eq!(got[0], Tally::Leased(4), "the lease's next position");
    assert_eq!(got[1], Tally::Count(1));
    token.cancel();
}
