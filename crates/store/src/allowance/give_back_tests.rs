use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::tests::{Shared, at, chunk_of};
use super::super::{Allowance, Plan};
use crate::limiter::{Now, Tally};
use crate::{CountedLate, Increment};

/// The usage a counter's walk leaves: net crossings of each level.
#[derive(Debug, Default)]
struct Walk(parking_lot::Mutex<BTreeMap<u64, i64>>);

impl Walk {
    fn step(&self, from: u64, to: u64) {
        let mut levels = self.0.lock();
        for l in from.min(to) + 1..=from.max(to) {
            *levels.entry(l).or_default() += if to > from { 1 } else { -1 };
        }
    }

    /// The levels crossed once more up than down, and whether every
    /// other level nets to nothing.
    fn net(&self) -> (Vec<u64>, bool) {
        let levels = self.0.lock();
        let up = levels
            .iter()
            .filter(|(_, n)| **n == 1)
            .map(|(l, _)| *l)
            .collect();
        (up, levels.values().all(|n| *n == 0 || *n == 1))
    }
}

impl CountedLate for Walk {
    fn counted_late(&self, inc: &Increment, tally: Tally) {
        if let Some((before, after, _)) = sluice_core::usage::crossing(tally, inc.hits, inc.refund)
        {
            self.step(before, after);
        }
    }

    fn leased_back(&self, inc: &Increment, tally: Tally) {
        if let Tally::Count(after) = tally {
            self.step(after + inc.hits, after);
        }
    }
}

/// One request through `a` as the safety net and the server run it (the
/// request path crosses a plain count's levels): its position, and
/// whether it took a chunk.
fn answer(a: &Allowance, inc: &Increment, store: &mut Shared, walk: &Walk) -> (u64, bool) {
    match a.plan(inc) {
        Plan::Served(Tally::Leased(pos)) => (pos, false),
        // A take ahead, landing at once.
        Plan::Ahead(Tally::Leased(pos), chunk) => {
            store.0 += chunk;
            a.took_ahead(&chunk_of(inc, chunk), Tally::Count(store.0), inc.at_us);
            (pos, true)
        }
        Plan::Take { chunk } => {
            store.0 += chunk;
            match a.took(inc, &chunk_of(inc, chunk), Tally::Count(store.0), inc.at_us) {
                Tally::Leased(pos) => (pos, true),
                other => panic!("{other:?}"),
            }
        }
        Plan::Plain | Plan::Behind => {
            let before = store.0;
            store.0 += inc.hits;
            a.answered(inc, &Tally::Count(store.0));
            match a.rescue(inc, Tally::Count(store.0)) {
                Tally::Count(c) => {
                    walk.step(before, c);
                    (c, false)
                }
                Tally::Leased(pos) => (pos, false),
                other => panic!("{other:?}"),
            }
        }
        Plan::Served(other) | Plan::Ahead(other, _) => panic!("{other:?}"),
    }
}

/// Three instances leasing one hot counter, its requests spread over them
/// in a scrambled order: once the window has ended and what was never
/// spent is given back, the count's walk crosses exactly the levels 1 to
/// the requests sent, once each, as one store count per request would.
#[test]
fn the_walk_of_a_leased_count_crosses_each_level_once_after_give_back() {
    for (limit, requests) in [(10_000, 700), (300, 280), (100, 150)] {
        let walk = Arc::new(Walk::default());
        let fleet: Vec<Allowance> = (0..3).map(|_| Allowance::new(100, 4096)).collect();
        let mut store = Shared(0);
        let (mut admitted, mut takes) = (0, 0);
        for i in 0..requests {
            let inc = Increment {
                leased_usage: Some(walk.clone()),
                ..at("a", limit, 60_000_000 + i * 37)
            };
            let a = &fleet[(i as usize * 7 + i as usize / 5) % 3];
            let (pos, took) = answer(a, &inc, &mut store, &walk);
            admitted += u64::from(pos <= u64::from(limit));
            takes += u32::from(took);
        }
        // The window (a minute from 60 s) has ended: what was never spent
        // goes back, the store's count and the walk down with it.
        for a in &fleet {
            a.sweep(Now(125));
            for back in a.due_back(Now(125)) {
                store.0 -= back.hits;
                walk.leased_back(&back, Tally::Count(store.0));
            }
        }
        assert!(takes >= 6, "limit {limit}: {takes} takes");
        let (up, clean) = walk.net();
        assert!(
            clean,
            "limit {limit}: a level crossed twice: {:?}",
            walk.0.lock()
        );
        assert_eq!(up, (1..=requests).collect::<Vec<_>>(), "limit {limit}");
        assert_eq!(
            store.0, requests,
            "limit {limit}: the count is what was sent"
        );
        assert!(admitted <= u64::from(limit), "limit {limit}: {admitted}");
    }
}

/// One instance that answered 40 requests of a hot counter in the minute
/// from 60 s, and the store's count of them.
fn forty_hot_requests() -> (Allowance, Shared) {
    let walk = Arc::new(Walk::default());
    let a = Allowance::new(100, 4096);
    let mut store = Shared(0);
    for i in 0..40 {
        let inc = Increment {
            leased_usage: Some(walk.clone()),
            ..at("a", 10_000, 60_000_000 + i * 10)
        };
        answer(&a, &inc, &mut store, &walk);
    }
    (a, store)
}

/// Nothing goes back before its window has ended: a count that fell
/// mid-window would void other instances' leases.
#[test]
fn nothing_is_given_back_before_its_window_ends() {
    let (a, store) = forty_hot_requests();
    a.sweep(Now(100));
    assert!(a.due_back(Now(100)).is_empty(), "the window ends at 120");
    a.sweep(Now(120));
    let back = a.due_back(Now(120));
    assert_eq!(back.iter().map(|b| b.hits).sum::<u64>(), store.0 - 40);
    assert!(back.iter().all(|b| b.refund && b.window.start.0 == 60));
}

/// A reset clears what was owed for the counter: given back after it, the
/// positions would take hits off the count that started again.
#[test]
fn a_reset_clears_what_was_owed() {
    let (a, _) = forty_hot_requests();
    a.sweep(Now(120));
    let key = at("a", 10_000, 60_000_000).key;
    a.forget(&key);
    assert!(a.due_back(Now(120)).is_empty());
}
