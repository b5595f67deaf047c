use std::collections::{BTreeSet, VecDeque};

use super::super::tests::{at, chunk_of};
use super::super::{Allowance, Plan};
use std::sync::atomic::Ordering::Relaxed;

use crate::Increment;
use crate::limiter::Tally;

/// A store `rtt_us` away from a fleet: a foreground call is answered at
/// once (its request waits, and is counted as waiting); a take ahead is
/// counted when sent and lands a round trip later.
struct Far {
    count: u64,
    rtt_us: u64,
    landing: VecDeque<(u64, usize, Increment, u64)>,
    waited: u64,
    positions: BTreeSet<u64>,
}

impl Far {
    fn new(rtt_us: u64) -> Far {
        Far {
            count: 0,
            rtt_us,
            landing: VecDeque::new(),
            waited: 0,
            positions: BTreeSet::new(),
        }
    }

    /// Lands what is due by `now`, then one request of `inc` through
    /// instance `i` of `fleet`: its position (or count).
    fn request(&mut self, fleet: &[Allowance], i: usize, inc: &Increment) -> u64 {
        while self
            .landing
            .front()
            .is_some_and(|(due, ..)| *due <= inc.at_us)
        {
            if let Some((due, j, sent, after)) = self.landing.pop_front() {
                fleet[j].took_ahead(&sent, Tally::Count(after), due);
            }
        }
        let a = &fleet[i];
        match a.plan(inc) {
            Plan::Served(Tally::Leased(p)) => p,
            Plan::Ahead(Tally::Leased(p), chunk) => {
                self.count += chunk;
                let due = inc.at_us + self.rtt_us;
                self.landing
                    .push_back((due, i, chunk_of(inc, chunk), self.count));
                p
            }
            Plan::Take { chunk } => {
                self.waited += 1;
                self.count += chunk;
                // Had a round trip later (as the store's round trip is
                // measured), answered at once here.
                let had_us = inc.at_us + self.rtt_us;
                match a.took(inc, &chunk_of(inc, chunk), Tally::Count(self.count), had_us) {
                    Tally::Leased(p) => p,
                    other => panic!("{other:?}"),
                }
            }
            Plan::Plain | Plan::Behind => {
                self.waited += 1;
                self.count += inc.hits;
                a.answered(inc, &Tally::Count(self.count));
                match a.rescue(inc, Tally::Count(self.count)) {
                    Tally::Count(c) | Tally::Leased(c) => c,
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The far store: 80 ms away, a hot key at a thousand a second far
/// from its limit. Renewed ahead, no request waits once the key is warm;
/// renewed only when run out, a request waits at every renewal.
#[test]
fn a_hot_key_never_waits_for_a_far_store_once_warm() {
    for (ahead, most) in [(true, 0), (false, u64::MAX)] {
        let fleet = [Allowance::new(100, 4096).renewing_ahead(ahead)];
        fleet[0].round_trip(80_000);
        let mut far = Far::new(80_000);
        let mut warm = 0;
        for ms in 0..20_000u64 {
            far.request(&fleet, 0, &at("a", 1_000_000, 60_000_000 + ms * 1_000 / 2));
            if ms == 2_000 {
                warm = far.waited;
            }
        }
        let waited = far.waited - warm;
        if ahead {
            assert_eq!(waited, most, "ahead: {waited} requests waited once warm");
        } else {
            assert!(waited > 10, "without: only {waited} waited");
        }
    }
}

/// Three instances on a limit of 1,000 a minute, their takes ahead landing
/// 80 ms after they were counted (foreground takes sent later overtake
/// them): every position admitted once, exactly the limit.
#[test]
fn takes_ahead_landing_late_never_admit_past_the_limit() {
    let fleet: Vec<Allowance> = (0..3).map(|_| Allowance::new(100, 4096)).collect();
    for a in &fleet {
        a.round_trip(80_000);
    }
    let mut far = Far::new(80_000);
    let mut admitted = 0;
    for i in 0..3_000u64 {
        let inc = at("a", 1_000, 60_000_000 + i * 300);
        let pos = far.request(&fleet, (i % 3) as usize, &inc);
        if pos <= 1_000 {
            admitted += 1;
            assert!(far.positions.insert(pos), "position {pos} given twice");
        }
    }
    // Nothing stranded: a chunk landing while another is queued (a
    // foreground take replaced the lease meanwhile) is kept, not dropped.
    let stranded: u64 = fleet.iter().map(|a| a.stranded.load(Relaxed)).sum();
    assert_eq!((admitted, stranded), (1_000, 0));
}

/// A take ahead whose count says the current segment was taken back (a
/// reset through another instance) voids it: the chunk is the lease.
#[test]
fn a_take_ahead_that_finds_a_reset_voids_the_current_segment() {
    let fleet = [Allowance::new(100, 4096)];
    let mut far = Far::new(80_000);
    let mut t = 60_000_000;
    let mut sent = None;
    // Requests a millisecond apart, answered as the far store would, until
    // one sets off a take ahead (held: it lands below).
    while sent.is_none() && t < 61_000_000 {
        t += 1_000;
        let inc = at("a", 1_000_000, t);
        match fleet[0].plan(&inc) {
            Plan::Ahead(_, chunk) => sent = Some(chunk_of(&inc, chunk)),
            Plan::Take { chunk } => {
                far.count += chunk;
                fleet[0].took(&inc, &chunk_of(&inc, chunk), Tally::Count(far.count), t);
            }
            Plan::Plain | Plan::Behind => {
                far.count += 1;
                fleet[0].answered(&inc, &Tally::Count(far.count));
            }
            Plan::Served(_) => {}
        }
    }
    // Reset to 0 elsewhere; the take ahead counted 1..=chunk after it.
    let sent = sent.expect("a take ahead within a second");
    fleet[0].took_ahead(&sent, Tally::Count(sent.hits), t + 80_000);
    assert_eq!(
        fleet[0].plan(&at("a", 1_000_000, t + 80_001)),
        Plan::Served(Tally::Leased(1)),
        "the new chunk's first position"
    );
}
