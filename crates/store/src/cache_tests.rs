use super::*;

fn inc(v: &str, limit: u32, now: u64) -> Increment {
    at(v, limit, now * 1_000_000)
}

fn at(v: &str, limit: u32, at_us: u64) -> Increment {
    Increment::test_hit(v, limit, at_us)
}

#[test]
fn answers_only_while_over_in_the_same_window() {
    let c = OverLimitCache::new(100);
    c.record(&inc("a", 5, 60), &Tally::Count(5));
    assert_eq!(c.over(&inc("a", 5, 60)), None, "at the limit is not over");
    c.record(&inc("a", 5, 60), &Tally::Count(6));
    assert_eq!(c.over(&at("a", 5, 60_400_000)), Some(Tally::Remembered(7)));
    assert_eq!(
        c.over(&inc("a", 5, 120)),
        None,
        "a new window asks the store"
    );
    assert_eq!(c.over(&inc("b", 5, 60)), None);
}

/// Another instance may reset or refund the counter: a refusal is
/// trusted for half a second, then the store is asked again.
#[test]
fn a_refusal_is_trusted_for_a_bounded_time_only() {
    let c = OverLimitCache::new(100);
    c.record(&at("a", 5, 60_000_000), &Tally::Count(6));
    assert_eq!(
        c.over(&at("a", 5, 60_000_000 + TRUST_US - 1)),
        Some(Tally::Remembered(7))
    );
    assert_eq!(
        c.over(&at("a", 5, 60_000_000 + TRUST_US)),
        None,
        "asked again"
    );
    // The store's new answer is trusted anew.
    c.record(&at("a", 5, 60_000_000 + TRUST_US), &Tally::Count(7));
    assert_eq!(
        c.over(&at("a", 5, 60_000_000 + TRUST_US + 1)),
        Some(Tally::Remembered(8))
    );
}

/// This instance's clock may be behind the store's by the reading's
/// error: a refusal remembered for a window is not answered in its
/// last moment, when the store's next window may have begun.
#[test]
fn a_refusal_is_not_remembered_into_the_last_moment_of_its_window() {
    let c = OverLimitCache::new(100);
    // A minute's window: [60 s, 120 s).
    c.record(&at("a", 5, 119_600_000), &Tally::Count(6));
    let last = 120_000_000 - clock::guard_us();
    assert_eq!(c.over(&at("a", 5, last - 1)), Some(Tally::Remembered(7)));
    assert_eq!(c.over(&at("a", 5, last)), None, "the store is asked");
}

#[test]
fn a_higher_override_is_not_blocked() {
    let c = OverLimitCache::new(100);
    c.record(&inc("a", 5, 60), &Tally::Count(6));
    assert_eq!(c.over(&inc("a", 100, 60)), None);
}

#[test]
fn a_full_cache_still_remembers_the_newest_over_limit_key() {
    let c = OverLimitCache::new(16);
    for i in 0..1000 {
        c.record(&inc(&i.to_string(), 0, 60), &Tally::Count(1));
    }
    c.record(&inc("newest", 0, 60), &Tally::Count(1));
    assert_eq!(c.over(&inc("newest", 0, 60)), Some(Tally::Remembered(2)));
}

#[test]
fn bounded_and_swept() {
    let c = OverLimitCache::new(16);
    for i in 0..1000 {
        c.record(&inc(&i.to_string(), 0, 60), &Tally::Count(1));
    }
    assert!(c.len() <= 16, "{}", c.len());
    c.sweep(Now(120));
    assert!(c.is_empty());
    let off = OverLimitCache::new(0);
    off.record(&inc("a", 0, 60), &Tally::Count(1));
    assert_eq!(off.over(&inc("a", 0, 60)), None);
}

#[derive(Debug)]
struct Listener;
impl crate::CountedLate for Listener {
    fn counted_late(&self, _: &Increment, _: Tally) {}
}

/// A shadow-mode counter is answered here, its hits kept for the store
/// and handed over once; the store's count then includes them.
#[test]
fn a_shadow_counters_hits_are_kept_for_the_store() {
    let c = OverLimitCache::new(100);
    let shadow = |at_us| Increment {
        late: Some(std::sync::Arc::new(Listener)),
        ..at("s", 3, at_us)
    };
    c.record(&shadow(60_000_000), &Tally::Count(4));
    assert_eq!(c.over(&shadow(60_000_001)), Some(Tally::Remembered(5)));
    assert_eq!(c.over(&shadow(60_000_002)), Some(Tally::Remembered(6)));
    let due = c.due();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].hits, due[0].at_us), (2, 60_000_002));
    assert!(c.due().is_empty(), "handed over once");
    // Answered again before the store's count of the two comes back:
    // that one is still pending, on top of the store's count.
    assert_eq!(c.over(&shadow(60_000_003)), Some(Tally::Remembered(7)));
    c.record(&due[0], &Tally::Count(6));
    assert_eq!(c.over(&shadow(60_000_004)), Some(Tally::Remembered(8)));
    assert_eq!(c.due()[0].hits, 2);
    // An enforced counter keeps nothing.
    c.record(&at("e", 3, 60_000_000), &Tally::Count(4));
    assert!(c.over(&at("e", 3, 60_000_001)).is_some());
    assert!(c.due().is_empty());
}
