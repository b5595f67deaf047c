//! Counting after: the bound (at most instances x credit past the limit a
//! window) under every interleaving a far store allows, a cold key answered
//! without the store, and the counter bound.

use super::*;
use crate::limiter::{Tally, Unit, Window};

fn hit(key: &str, limit: u32, at_s: u64) -> Increment {
    Increment {
        count_after: true,
        ..Increment {
            key: CounterKey::new("d", Unit::Minute, [("k", key)]),
            window: Window::containing(Unit::Minute, Now(at_s)),
            ..Increment::test_hit(key, limit, at_s * 1_000_000)
        }
    }
}

/// A small deterministic generator: the schedules are many, not random.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One count in flight: sent by `from`, applied at the store (`Some`
/// count) or not yet.
struct Flight {
    from: usize,
    inc: Increment,
    count: Option<u64>,
}

/// One step of a call in flight, picked by `rng`: it fails before reaching
/// the store, or reaches it, or its answer comes back (or never does: a
/// timeout, in doubt).
fn fly(credits: &[Credit], flights: &mut Vec<Flight>, store: &mut u64, rng: &mut Rng) {
    let f = rng.below(flights.len());
    let fails = rng.below(10) == 0;
    let flight = flights.get_mut(f).unwrap();
    match flight.count {
        None if fails => {
            let done = flights.swap_remove(f);
            credits.get(done.from).unwrap().landed(&done.inc, None);
        }
        None => {
            *store += flight.inc.hits;
            flight.count = Some(*store);
        }
        Some(n) => {
            let done = flights.swap_remove(f);
            let tally = (rng.below(5) != 0).then_some(Tally::Count(n));
            credits.get(done.from).unwrap().landed(&done.inc, tally);
        }
    }
}

/// `instances` instances hammer one key against a store whose calls are
/// applied and answered in any order the schedule picks (a far store, each
/// instance a different distance away), some calls failing before or after
/// the store counted them; returns (admitted, what the store counted of the
/// hits admitted or refused, hits refused on the exact path).
fn run(instances: usize, limit: u32, percent: u64, seed: u64) -> (u64, u64, u64) {
    let credits: Vec<Credit> = (0..instances).map(|_| Credit::new(100, percent)).collect();
    let mut rng = Rng(seed);
    let (mut store, mut admitted, mut refused) = (0u64, 0u64, 0u64);
    let mut flights: Vec<Flight> = Vec::new();
    let inc = hit("k", limit, 60);
    for _ in 0..(limit as usize * 4) {
        let i = rng.below(instances);
        let c = credits.get(i).unwrap();
        match rng.below(4) {
            // A request: on credit, or the exact path (a count of its own).
            0 | 1 => {
                if c.admit(&inc).is_some() {
                    admitted += 1;
                } else {
                    store += 1;
                    let ok = store <= u64::from(limit);
                    admitted += u64::from(ok);
                    refused += u64::from(!ok);
                    c.answered(&inc, &Tally::Count(store));
                }
            }
            // The settler's round.
            2 => flights.extend(c.take_due().into_iter().map(|inc| Flight {
                from: i,
                inc,
                count: None,
            })),
            _ if !flights.is_empty() => fly(&credits, &mut flights, &mut store, &mut rng),
            _ => {}
        }
    }
    // Everything still owed reaches the store.
    for f in flights.drain(..) {
        store += if f.count.is_none() { f.inc.hits } else { 0 };
    }
    for c in &credits {
        store += c.take_due().iter().map(|i| i.hits).sum::<u64>();
    }
    (admitted, store, refused)
}

#[test]
fn a_key_passes_its_limit_by_at_most_instances_times_its_credit() {
    for (instances, limit, percent) in [(2, 100, 5), (3, 100, 10), (5, 40, 5), (4, 1000, 2)] {
        let credit = (u64::from(limit) * percent / 100).max(1);
        let bound = u64::from(limit) + instances as u64 * credit;
        let mut worst = 0;
        for seed in 1..=400 {
            let (admitted, store, refused) = run(instances, limit, percent, seed * 7919);
            assert!(
                admitted <= bound,
                "{instances} instances, limit {limit}, credit {credit}, seed {seed}: admitted {admitted} > {bound}"
            );
            // Nothing is counted twice: a count in doubt is never sent
            // again, so the store never holds more than was asked of it
            // (and a refusal never comes from a count inflated past it).
            assert!(
                store <= admitted + refused,
                "seed {seed}: store {store} > admitted {admitted} + refused {refused}"
            );
            worst = worst.max(admitted);
        }
        // The bound is reached, not merely loose: some schedule goes over.
        assert!(
            worst > u64::from(limit),
            "{instances} x {limit}: never over ({worst})"
        );
    }
}

#[test]
fn a_cold_key_is_answered_at_once_and_its_hits_sent_after() {
    let c = Credit::new(100, 5);
    let inc = hit("cold", 100, 60);
    // Five hits of credit (5% of 100): each answered with its position.
    for n in 1..=5 {
        assert_eq!(c.admit(&inc), Some(Tally::Leased(n)));
    }
    assert_eq!(c.admit(&inc), None, "credit spent: the exact path");
    let due = c.take_due();
    assert_eq!(due.iter().map(|i| i.hits).collect::<Vec<_>>(), [5]);
    assert!(!due[0].count_after && due[0].take.is_none());
    assert_eq!(c.admit(&inc), None, "still in flight: still spent");
    assert!(c.take_due().is_empty(), "one count of a key in flight");
    // The store had 90 from others: 5 more fit, judged against 95.
    c.landed(&due[0], Some(Tally::Count(95)));
    assert_eq!(c.admit(&inc), Some(Tally::Leased(96)));
    for _ in 0..4 {
        assert!(c.admit(&inc).is_some());
    }
    assert_eq!(c.admit(&inc), None, "95 + 5 owed: the limit");
    // A rule that does not count after never is.
    let exact = Increment {
        count_after: false,
        ..hit("exact", 100, 60)
    };
    assert_eq!(c.admit(&exact), None);
}

#[test]
fn a_count_that_failed_is_in_doubt_never_sent_again_and_holds_its_credit() {
    let c = Credit::new(100, 50);
    let inc = hit("k", 10, 60);
    c.admit(&inc);
    c.admit(&inc);
    let due = c.take_due();
    // No answer: the store may have counted the 2 hits, or not.
    c.landed(&due[0], None);
    assert!(c.take_due().is_empty(), "never sent again");
    assert_eq!(c.owed(), 2, "still held against the credit");
    assert_eq!(c.admit(&inc).map(|_| ()), Some(()), "3 of a credit of 5");
    assert_eq!(c.admit(&inc).map(|_| ()), Some(()));
    assert_eq!(c.admit(&inc).map(|_| ()), Some(()));
    assert_eq!(c.admit(&inc), None, "5 answered the store may lack");
    assert_eq!(c.sweep(Now(61)), 2, "the hits put in doubt");
    // The next window starts afresh once the last one's hits are counted.
    for inc in c.take_due() {
        c.landed(&inc, Some(Tally::Count(5)));
    }
    c.sweep(Now(120));
    assert!(c.admit(&hit("k", 10, 120)).is_some());
}

#[test]
fn a_new_window_waits_for_the_last_ones_hits_and_a_reset_forgets() {
    let c = Credit::new(100, 50);
    assert!(c.admit(&hit("k", 10, 60)).is_some());
    assert_eq!(
        c.admit(&hit("k", 10, 120)),
        None,
        "the last window's hit is owed"
    );
    let due = c.take_due();
    c.landed(&due[0], Some(Tally::Count(1)));
    assert_eq!(c.admit(&hit("k", 10, 120)), Some(Tally::Leased(1)));
    c.forget(&hit("k", 10, 120).key);
    assert_eq!(c.owed(), 0);
}

#[test]
fn counters_on_credit_are_bounded_and_kept_until_their_window_ends() {
    let c = Credit::new(16, 100);
    let admitted = (0..200)
        .filter(|n| c.admit(&hit(&format!("k{n}"), 10, 60)).is_some())
        .count();
    // At most 16 shards x 1: the rest take the exact path.
    assert!((1..=16).contains(&admitted), "{admitted}");
    // Counted, they stay: a key dropped and seen again would start afresh.
    for inc in c.take_due() {
        c.landed(&inc, Some(Tally::Count(1)));
    }
    let later = (200..400)
        .filter(|n| c.admit(&hit(&format!("k{n}"), 10, 60)).is_some())
        .count();
    assert_eq!(later, 0, "no room until the window ends");
    c.sweep(Now(120));
    let next = (400..600)
        .filter(|n| c.admit(&hit(&format!("k{n}"), 10, 120)).is_some())
        .count();
    assert!(next >= 1, "room once the window ended");
}

#[test]
fn a_count_in_another_window_or_the_window_s_last_moment_ends_the_credit() {
    let c = Credit::new(100, 50);
    assert!(c.admit(&hit("k", 10, 60)).is_some());
    let due = c.take_due();
    // The store's clock put the hit in its next window: this instance's
    // view of the window is not the store's.
    c.landed(&due[0], Some(Tally::Moved(1)));
    assert_eq!(
        c.admit(&hit("k", 10, 61)),
        None,
        "the exact path for the rest of it"
    );
    // The window's last moment (within the clock guard of its end).
    let last = Increment {
        at_us: 120 * 1_000_000 - 1,
        ..hit("late", 10, 119)
    };
    assert_eq!(c.admit(&last), None);
}
