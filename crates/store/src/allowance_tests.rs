use super::*;

pub(super) fn at(v: &str, limit: u32, at_us: u64) -> Increment {
    Increment {
        leasable: true,
        usage_counts_refused: false,
        ..Increment::test_hit(v, limit, at_us)
    }
}

/// The take of `chunk` hits in `inc`'s place.
pub(super) fn chunk_of(inc: &Increment, chunk: u64) -> Increment {
    Increment {
        hits: chunk,
        ..inc.clone()
    }
}

/// A store shared by instances: one fixed-window count.
pub(super) struct Shared(pub(super) u64);

impl Shared {
    /// One request through `a`, as the safety net runs it: its answer.
    fn request(&mut self, a: &Allowance, inc: &Increment) -> u64 {
        let count = |t: Tally| match t {
            Tally::Count(c) | Tally::Leased(c) => c,
            other => panic!("{other:?}"),
        };
        match a.plan(inc) {
            Plan::Served(t) => count(t),
            // A take ahead, landing at once.
            Plan::Ahead(t, chunk) => {
                self.0 += chunk;
                a.took_ahead(&chunk_of(inc, chunk), Tally::Count(self.0), inc.at_us);
                count(t)
            }
            Plan::Take { chunk } => {
                self.0 += chunk;
                let sent = Increment {
                    hits: chunk,
                    ..inc.clone()
                };
                count(a.took(inc, &sent, Tally::Count(self.0), inc.at_us))
            }
            Plan::Plain | Plan::Behind => {
                self.0 += inc.hits;
                a.answered(inc, &Tally::Count(self.0));
                self.0
            }
        }
    }
}

#[test]
fn a_hot_key_takes_growing_chunks_and_answers_from_them() {
    let a = Allowance::new(100, 4096).renewing_ahead(false);
    let mut store = Shared(0);
    let mut t = 60_000_000;
    let mut answers = Vec::new();
    for _ in 0..200 {
        t += 10;
        answers.push(store.request(&a, &at("a", 10_000, t)));
    }
    assert_eq!(
        answers,
        (1..=200).collect::<Vec<_>>(),
        "each request gets its position"
    );
    // 1 plain, then chunks 2, 4, 8, 16, 32, 64, 128: the store holds the
    // whole last chunk.
    assert_eq!(store.0, 1 + 2 + 4 + 8 + 16 + 32 + 64 + 128);
}

#[test]
fn instances_sharing_a_limit_admit_exactly_the_limit_never_more() {
    for limit in [16, 100, 1000, 5000] {
        let fleet: Vec<Allowance> = (0..3).map(|_| Allowance::new(100, 4096)).collect();
        let mut store = Shared(0);
        let mut admitted = 0;
        for i in 0..3 * u64::from(limit) {
            let t = 60_000_000 + i;
            let pos = store.request(&fleet[(i % 3) as usize], &at("a", limit, t));
            admitted += u64::from(pos <= u64::from(limit));
        }
        assert_eq!(admitted, u64::from(limit), "limit {limit}");
    }
}

#[test]
fn near_the_limit_every_request_asks_the_store() {
    let a = Allowance::new(100, 4096);
    // 15 left: an eighth of the headroom is under two hits.
    for i in 0..5 {
        let inc = at("a", 100, 60_000_000 + i);
        assert_eq!(a.plan(&inc), Plan::Plain);
        a.answered(&inc, &Tally::Count(85 + i));
    }
    // And a chunk is never more than an eighth of what is left.
    let b = Allowance::new(100, 4096);
    b.answered(&at("b", 1000, 60_000_000), &Tally::Count(980));
    assert_eq!(b.plan(&at("b", 1000, 60_000_001)), Plan::Take { chunk: 2 });
    let c = Allowance::new(100, 4096);
    let mut store = Shared(0);
    let mut i = 0;
    while store.request(&c, &at("c", 1000, 60_000_000 + i)) < 1000 {
        i += 1;
    }
    assert_eq!(i, 999, "every position up to the limit admitted");
    assert!(store.0 <= 1000 + 125, "{}", store.0);
}

#[test]
fn a_lease_is_trusted_for_half_a_second_and_a_slow_key_never_grows() {
    let a = Allowance::new(100, 4096).renewing_ahead(false);
    let mut store = Shared(0);
    for i in 0..4 {
        store.request(&a, &at("a", 10_000, 60_000_000 + i));
    }
    // A lease of 4 was taken at +3 (1 plain, then 2): one position spent.
    assert!(matches!(
        a.plan(&at("a", 10_000, 60_000_000 + 3 + TRUST_US - 1)),
        Plan::Served(_)
    ));
    // Past its trust, the store is asked plainly: a count at or past the
    // lease's last position renews it...
    let late = at("a", 10_000, 60_000_000 + 3 + TRUST_US);
    assert_eq!(a.plan(&late), Plan::Plain, "asked again");
    a.answered(&late, &Tally::Count(8));
    assert_eq!(
        a.plan(&at("a", 10_000, 60_000_010 + TRUST_US)),
        Plan::Served(Tally::Leased(6))
    );
    // ...and a count below it (a reset through another instance) voids it.
    let later = at("a", 10_000, 60_000_000 + 3 * TRUST_US);
    assert_eq!(a.plan(&later), Plan::Plain);
    a.answered(&later, &Tally::Count(1));
    assert!(!matches!(
        a.plan(&at("a", 10_000, 60_000_001 + 3 * TRUST_US)),
        Plan::Served(_)
    ));
    assert_eq!(a.sweep(Now(0)), 1, "the voided lease's last position");
    // One request a second: plain, every time.
    let b = Allowance::new(100, 4096);
    for s in 0..10 {
        assert_eq!(b.plan(&at("b", 10_000, (60 + s) * 1_000_000)), Plan::Plain);
        b.answered(&at("b", 10_000, (60 + s) * 1_000_000), &Tally::Count(s + 1));
    }
}

#[test]
fn one_take_at_a_time_and_a_failed_one_can_be_retried() {
    let a = Allowance::new(100, 4096);
    a.answered(&at("a", 1000, 60_000_000), &Tally::Count(1));
    assert_eq!(a.plan(&at("a", 1000, 60_000_001)), Plan::Take { chunk: 2 });
    assert_eq!(
        a.plan(&at("a", 1000, 60_000_002)),
        Plan::Behind,
        "a take in flight"
    );
    // A plain answer meanwhile leaves the take in flight alone.
    a.answered(&at("a", 1000, 60_000_002), &Tally::Count(2));
    assert_eq!(a.plan(&at("a", 1000, 60_000_003)), Plan::Behind);
    // Only the take's own failure gives it up.
    a.abandon(&at("a", 1000, 60_000_002));
    assert_eq!(a.plan(&at("a", 1000, 60_000_003)), Plan::Behind);
    a.abandon(&at("a", 1000, 60_000_001));
    assert!(matches!(
        a.plan(&at("a", 1000, 60_000_004)),
        Plan::Take { .. }
    ));
}

#[test]
fn a_lease_never_answers_past_a_lower_override_a_new_window_or_a_reset() {
    let a = Allowance::new(100, 4096);
    let mut store = Shared(0);
    for i in 0..8 {
        store.request(&a, &at("a", 10_000, 60_000_000 + i));
    }
    assert!(matches!(
        a.plan(&at("a", 4, 60_000_100)),
        Plan::Plain | Plan::Take { .. }
    ));
    assert!(!matches!(
        a.plan(&at("a", 10_000, 120_000_000)),
        Plan::Served(_)
    ));
    let b = Allowance::new(100, 4096);
    for i in 0..8 {
        store.request(&b, &at("b", 10_000, 60_000_000 + i));
    }
    b.forget(&at("b", 10_000, 0).key);
    assert_eq!(b.plan(&at("b", 10_000, 60_000_010)), Plan::Plain);
}

#[test]
fn refunds_slots_other_shapes_and_opted_out_rules_are_never_leased() {
    let a = Allowance::new(100, 4096);
    let mut store = Shared(0);
    for i in 0..8 {
        store.request(&a, &at("a", 10_000, 60_000_000 + i));
    }
    let mut refund = at("a", 10_000, 60_000_010);
    refund.refund = true;
    let mut opted = at("a", 10_000, 60_000_010);
    opted.leasable = false;
    let mut sliding = at("a", 10_000, 60_000_010);
    sliding.algorithm = Algorithm::SlidingWindow;
    for inc in [refund, opted, sliding] {
        assert_eq!(a.plan(&inc), Plan::Plain, "{inc:?}");
    }
    let off = Allowance::new(0, 4096);
    off.answered(&at("a", 10_000, 60_000_000), &Tally::Count(1));
    assert_eq!(off.plan(&at("a", 10_000, 60_000_001)), Plan::Plain);
}

/// A poisoned counter (one at the store's ceiling) is answered, never a
/// panic: every step saturates.
#[test]
fn a_counter_at_the_ceiling_breaks_nothing() {
    let a = Allowance::new(100, 4096);
    let inc = at("full", u32::MAX, 60_000_000);
    a.answered(&inc, &Tally::Count(u64::MAX));
    assert_eq!(a.plan(&at("full", u32::MAX, 60_000_001)), Plan::Plain);
    a.answered(&inc, &Tally::Count(u64::MAX));
    assert_eq!(
        a.took(&inc, &chunk_of(&inc, 8), Tally::Count(u64::MAX), 60_000_002),
        Tally::Leased(u64::MAX - 7)
    );
    assert_eq!(a.sweep(Now(1_000_000)), 0);
}

/// A request asked plainly while a take was in flight, whose count comes
/// back past the limit after the take landed, is answered from the lease:
/// no instance refuses while it holds allowance.
#[test]
fn a_refusal_is_answered_from_a_lease_the_instance_holds() {
    let a = Allowance::new(100, 4096);
    a.answered(&at("a", 50, 60_000_000), &Tally::Count(30));
    let take = at("a", 50, 60_000_001);
    assert_eq!(a.plan(&take), Plan::Take { chunk: 2 });
    let waiting = at("a", 50, 60_000_002);
    assert_eq!(a.plan(&waiting), Plan::Behind, "a take in flight");
    // Another instance spent the rest meanwhile: the take gets 49 and 50.
    assert_eq!(
        a.took(&take, &chunk_of(&take, 2), Tally::Count(50), 60_000_003),
        Tally::Leased(49)
    );
    a.answered(&waiting, &Tally::Count(51));
    assert_eq!(a.rescue(&waiting, Tally::Count(51)), Tally::Leased(50));
    // Nothing left: a refusal stays one.
    assert_eq!(a.rescue(&waiting, Tally::Count(52)), Tally::Count(52));
    assert_eq!(a.sweep(Now(1_000_000)), 0, "nothing stranded");
}

/// A refusal handled before the take it was counted behind waits for the
/// take to land and is answered from its lease; with no take in flight, or
/// none landing in time, a refusal is answered at once.
#[tokio::test(start_paused = true)]
async fn a_refusal_behind_a_take_in_flight_waits_for_its_lease() {
    use std::time::Duration;
    use tokio::time::Instant;
    let a = std::sync::Arc::new(Allowance::new(100, 4096));
    a.answered(&at("a", 50, 60_000_000), &Tally::Count(30));
    let take = at("a", 50, 60_000_001);
    assert_eq!(a.plan(&take), Plan::Take { chunk: 2 });
    let behind = at("a", 50, 60_000_002);
    assert_eq!(a.plan(&behind), Plan::Behind);
    // Its count (past the limit) is handled before the take's answer.
    a.answered(&behind, &Tally::Count(51));
    assert_eq!(a.rescue(&behind, Tally::Count(51)), Tally::Count(51));
    let until = Instant::now() + Duration::from_millis(20);
    let waiting = tokio::spawn({
        let (a, behind) = (a.clone(), behind.clone());
        async move { a.behind_take(&behind, Tally::Count(51), until).await }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(!waiting.is_finished(), "waits for the take");
    assert_eq!(
        a.took(&take, &chunk_of(&take, 2), Tally::Count(50), 60_000_003),
        Tally::Leased(49)
    );
    assert_eq!(waiting.await.ok(), Some(Tally::Leased(50)));
    assert_eq!(a.sweep(Now(1_000_000)), 0, "nothing stranded");
    // No take in flight: at once. A take that never lands: until `until`.
    let started = Instant::now();
    let refused = Tally::Count(52);
    assert_eq!(a.behind_take(&behind, refused, until).await, refused);
    assert_eq!(Instant::now(), started);
    let b = at("b", 50, 60_000_001);
    a.answered(&b, &Tally::Count(30));
    assert_eq!(a.plan(&at("b", 50, 60_000_002)), Plan::Take { chunk: 2 });
    let until = Instant::now() + Duration::from_millis(20);
    assert_eq!(a.behind_take(&b, refused, until).await, refused);
    assert_eq!(Instant::now(), until);
}

/// A flood of new keys into a full map never evicts a counter's live
/// lease: its leased hits would be admitted by no one, and its client
/// refused short of its limit.
#[test]
fn a_flood_of_new_keys_never_strands_a_live_lease() {
    // One entry per shard: every newcomer of the hot key's shard must
    // make room.
    let a = Allowance::new(1, 4096);
    let mut store = Shared(0);
    for i in 0..8 {
        store.request(&a, &at("hot", 10_000, 60_000_000 + i));
    }
    for i in 0..2_000 {
        let inc = at(&format!("flood{i}"), 10_000, 60_000_100);
        a.answered(&inc, &Tally::Count(1));
    }
    assert!(matches!(
        a.plan(&at("hot", 10_000, 60_000_200)),
        Plan::Served(_)
    ));
    assert_eq!(a.sweep(Now(0)), 0, "nothing stranded");
}

/// Many requests at once: while each take is in flight, the key's other
/// requests are answered plainly (`Plan::Behind`); their answers must not
/// start the chunk over, or the lease never outgrows what one take's
/// waiters spend (a hot key on Redis under 256 requests in flight was
/// answered from its lease 176 times in 22,000).
#[test]
fn plain_answers_behind_a_take_do_not_start_the_chunk_over() {
    let a = Allowance::new(100, 4096).renewing_ahead(false);
    let mut count = 0;
    let mut t = 60_000_000;
    let mut chunks = Vec::new();
    let mut next = || {
        t += 1;
        at("a", 1_000_000, t)
    };
    // The next request the lease could not serve, and its plan.
    let asks = |a: &Allowance, next: &mut dyn FnMut() -> Increment| loop {
        let inc = next();
        match a.plan(&inc) {
            Plan::Served(_) => {}
            plan => return (inc, plan),
        }
    };
    let mut pending = asks(&a, &mut next);
    for _ in 0..8 {
        let (inc, plan) = pending;
        let Plan::Take { chunk } = plan else {
            count += 1;
            a.answered(&inc, &Tally::Count(count));
            pending = asks(&a, &mut next);
            continue;
        };
        chunks.push(chunk);
        // 32 requests behind it, counted plainly first, answered after.
        let behind: Vec<(Increment, u64)> = (0..32)
            .map(|_| {
                let b = next();
                assert_eq!(a.plan(&b), Plan::Behind);
                count += 1;
                (b, count)
            })
            .collect();
        count += chunk;
        a.took(&inc, &chunk_of(&inc, chunk), Tally::Count(count), inc.at_us);
        // The lease spent at once by requests already waiting for it, then
        // the plain answers come in, then the next request asks.
        for _ in 1..chunk {
            assert!(matches!(a.plan(&next()), Plan::Served(_)));
        }
        for (b, c) in &behind {
            a.answered(b, &Tally::Count(*c));
        }
        pending = asks(&a, &mut next);
    }
    assert!(
        chunks.windows(2).all(|w| w[1] == 2 * w[0]),
        "each take doubles the last: {chunks:?}"
    );
    assert!(chunks.len() >= 6, "{chunks:?}");
}
