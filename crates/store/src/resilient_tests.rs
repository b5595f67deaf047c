//! The safety net against a fake primary, on tokio's paused clock: which
//! errors trip the breaker, what a malformed reply becomes, how often a
//! store that answers probes but fails requests is tried again.

use super::*;
use crate::CounterKey;
use crate::limiter::{Decision, Unit, Window};
use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicUsize;

/// How the fake answers an increment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Count,
    /// Fewer counts than increments, as a broken proxy would answer.
    Short,
    /// Probes pass, increments fail: a Redis that refuses scripts.
    FailRequests,
    /// Never answers.
    Hang,
    /// A wait inside the call runs out (a pool's checkout).
    TimesOut,
    /// Counts at once, answers a take (hits over 1) 5 ms later.
    SlowTakes,
}

pub(super) struct Fake {
    pub(super) mode: StdMutex<Mode>,
    counts: StdMutex<std::collections::HashMap<String, u64>>,
    probes: AtomicUsize,
    pub(super) calls: AtomicUsize,
    /// What the fake says when asked whether a call of its is stalled.
    pub(super) stalled: StdMutex<Option<bool>>,
}

impl Fake {
    pub(super) fn new(mode: Mode) -> Arc<Fake> {
        Arc::new(Fake {
            mode: StdMutex::new(mode),
            counts: StdMutex::default(),
            probes: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            stalled: StdMutex::new(None),
        })
    }
}

impl Primary for Arc<Fake> {
    fn increment<'a>(
        &'a self,
        batch: &'a [&'a Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        self.calls.fetch_add(1, Relaxed);
        let mode = *self.mode.lock().unwrap();
        if mode == Mode::Hang {
            return Box::pin(std::future::pending());
        }
        let result = match mode {
            Mode::Hang => unreachable!(),
            Mode::TimesOut => Err(StoreError::Timeout),
            Mode::FailRequests => Err(StoreError::Unavailable("NOSCRIPT".into())),
            Mode::Short => Ok(Vec::new()),
            Mode::Count | Mode::SlowTakes => batch
                .iter()
                .map(|inc| {
                    let name = format!("{:?}", inc.key.parts().1);
                    if name.contains("poison") {
                        return Err(StoreError::Rejected("would overflow".into()));
                    }
                    let mut counts = self.counts.lock().unwrap();
                    let c = counts.entry(name).or_default();
                    *c += inc.hits;
                    Ok(Tally::Count(*c))
                })
                .collect(),
        };
        if mode == Mode::SlowTakes && batch.iter().any(|inc| inc.hits > 1) {
            return Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                result
            });
        }
        Box::pin(std::future::ready(result))
    }

    fn probe(&self) -> BoxFuture<'_, Result<Duration, StoreError>> {
        self.probes.fetch_add(1, Relaxed);
        Box::pin(std::future::ready(Ok(Duration::from_millis(1))))
    }

    fn backend(&self) -> &'static str {
        "redis"
    }

    fn stalled(&self, _at_least: Duration, _workers_late: Duration) -> Option<bool> {
        *self.stalled.lock().unwrap()
    }

    fn hearing(&self, _: Duration) -> Option<Hearing> {
        let ms = |ms| Duration::from_millis(ms);
        let silent = self.stalled.lock().unwrap().map(|s| ms(140 * u64::from(s)));
        Some(Hearing {
            silent,
            reader_late: ms(3),
        })
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

pub(super) fn inc(v: &str) -> Increment {
    Increment {
        key: CounterKey::new("d", Unit::Hour, [("k", v)]),
        window: Window::containing(Unit::Hour, Now(3600)),
        ..Increment::test_hit(v, 2, 3600 * 1_000_000)
    }
}

pub(super) fn net(fake: &Arc<Fake>, policy: FailurePolicy) -> Arc<Resilient> {
    net_with(fake, policy, 0)
}

fn net_with(fake: &Arc<Fake>, policy: FailurePolicy, cache_size: usize) -> Arc<Resilient> {
    Arc::new(Resilient::new(
        fake.clone(),
        ResilientOptions {
            policy,
            timeout: Duration::from_millis(20),
            cache_size,
            max_counters: 1000,
            allowance_keys: 1000,
            allowance_max_chunk: 4096,
            allowance_ahead: true,
            count_after_keys: 1000,
            count_after_credit: 5,
            count_after_interval: Duration::from_millis(50),
        },
        Arc::new(crate::Unobserved),
    ))
}

/// Starts the prober and waits until it has connected.
pub(super) async fn connected(r: &Arc<Resilient>, token: &CancellationToken) {
    let bg = r.clone().background(token.clone()).expect("a prober");
    tokio::spawn(bg);
    for _ in 0..100 {
        if r.health().healthy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never connected");
}

#[tokio::test(start_paused = true)]
async fn one_clients_refused_counter_never_trips_the_breaker() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Deny);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    for _ in 0..100 {
        // Decided by the policy (deny): over the limit, for this request only.
        let c = r.increment(&[inc("poison")]).await.unwrap();
        assert_eq!(c[0], Tally::Decided(Decision::Refuse));
    }
    assert!(r.health().healthy, "{:?}", r.health());
    for n in 1..=2 {
        let honest = r.increment(&[inc("honest")]).await.unwrap();
        assert_eq!(honest, [Tally::Count(n)]);
    }
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_short_reply_is_a_store_fault_never_an_admit() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Deny);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    *fake.mode.lock().unwrap() = Mode::Short;
    for _ in 0..TRIP_AFTER_FOR_TESTS {
        let c = r.increment(&[inc("a"), inc("b")]).await.unwrap();
        assert_eq!(c.len(), 2);
        assert!(
            c.iter().all(|t| *t == Tally::Decided(Decision::Refuse)),
            "denied by policy, not admitted: {c:?}"
        );
    }
    let h = r.health();
    assert!(!h.healthy);
    assert!(h.detail.unwrap_or_default().contains("malformed reply"));
    token.cancel();
}

const TRIP_AFTER_FOR_TESTS: u32 = super::super::breaker::TRIP_AFTER;

#[tokio::test(start_paused = true)]
async fn a_store_that_passes_probes_but_fails_requests_is_tried_ever_less() {
    let fake = Fake::new(Mode::FailRequests);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    // Ten minutes of steady traffic, one request every 10 ms.
    for _ in 0..60_000 {
        r.increment(&[inc("a")]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let probes = fake.probes.load(Relaxed);
    let calls = fake.calls.load(Relaxed);
    // Without damping: a probe and five failed calls every ~50 ms, some
    // 12,000 probes. With it, the probe interval grows to FLAP_MAX.
    assert!(probes < 40, "{probes} probes");
    assert!(calls < 200, "{calls} calls reached the failing store");
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_was_sluices_own_sheds_and_never_trips_or_falls_back() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    *fake.mode.lock().unwrap() = Mode::Hang;
    // No call of the store's is outstanding: the wait was sluice's queue
    // (for 40 waits of 20 ms, less than the silence that ends the benefit
    // of the doubt).
    *fake.stalled.lock().unwrap() = Some(false);
    for _ in 0..40 {
        let e = r.increment(&[inc("a")]).await.unwrap_err();
        assert!(matches!(e, StoreError::Busy(_)), "{e}");
    }
    // A rule that denies on failure stays closed when shed.
    let mut deny = inc("b");
    deny.on_failure = Some(FailurePolicy::Deny);
    let t = r.increment(&[deny, inc("c")]).await.unwrap();
    assert_eq!(t[0], Tally::Decided(Decision::Refuse), "{t:?}");
    assert!(
        r.health().healthy,
        "no trip without evidence about the store"
    );
    assert_eq!(r.counters().live, 0, "nothing moved onto the fallback");
    token.cancel();
}

/// Sluice's lateness can mislead on a host loaded past every measure: a
/// store that answers nothing is found out once silent for the bound.
#[tokio::test(start_paused = true)]
async fn a_store_that_answers_nothing_is_found_out_whatever_sluices_lateness() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    *fake.mode.lock().unwrap() = Mode::Hang;
    *fake.stalled.lock().unwrap() = Some(false);
    let hung = Instant::now();
    let mut shed = 0;
    while r.health().healthy {
        assert!(
            hung.elapsed() < blame::SILENCE_BOUND + Duration::from_millis(20) * 10,
            "still trusted after {:?} of silence",
            hung.elapsed()
        );
        match r.increment(&[inc("a")]).await {
            Err(StoreError::Busy(_)) => shed += 1,
            // Decided by the fallback: the store's fault.
            Ok(t) => assert_eq!(t.len(), 1),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(shed > 0, "sluice's lateness was believed at first");
    assert!(
        hung.elapsed() >= blame::SILENCE_BOUND,
        "found out after {:?}",
        hung.elapsed()
    );
    // An answer again: the benefit of the doubt comes back.
    *fake.mode.lock().unwrap() = Mode::Count;
    for _ in 0..100 {
        if r.health().healthy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(r.health().healthy, "taken back");
    r.increment(&[inc("a")]).await.unwrap();
    *fake.mode.lock().unwrap() = Mode::Hang;
    assert!(matches!(
        r.increment(&[inc("a")]).await,
        Err(StoreError::Busy(_))
    ));
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_store_call_unanswered_for_the_whole_wait_trips_the_breaker() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    *fake.mode.lock().unwrap() = Mode::Hang;
    *fake.stalled.lock().unwrap() = Some(true);
    for _ in 0..TRIP_AFTER_FOR_TESTS {
        // Decided by the fallback: the store failed.
        assert_eq!(r.increment(&[inc("a")]).await.unwrap().len(), 1);
    }
    assert!(!r.health().healthy);
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_caller_past_its_deadline_is_never_sent_to_the_store() {
    let fake = Fake::new(Mode::Count);
    let r = net(&fake, FailurePolicy::Fallback);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    let before = fake.calls.load(Relaxed);
    let gone = Some(Instant::now() + Duration::from_millis(1));
    let e = r.increment_until(&[inc("a")], gone).await.unwrap_err();
    assert!(matches!(e, StoreError::Busy(_)), "{e}");
    assert_eq!(fake.calls.load(Relaxed), before);
    // With time left, it is counted.
    let later = Some(Instant::now() + Duration::from_secs(1));
    assert_eq!(
        r.increment_until(&[inc("a")], later).await.unwrap(),
        [Tally::Count(1)]
    );
    token.cancel();
}

/// Yields until the fake has had `calls` calls: false if it never does.
async fn called(fake: &Fake, calls: usize) -> bool {
    for _ in 0..1000 {
        if fake.calls.load(Relaxed) >= calls {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

/// A take counted before plain requests but answered after them: each
/// refused meanwhile (another instance spent the rest) waits for the take
/// and is answered from its lease, none from the over-limit cache: no
/// leased position is left unspent while a request for it was refused.
#[tokio::test(start_paused = true)]
async fn refusals_behind_a_take_in_flight_get_its_positions() {
    let fake = Fake::new(Mode::SlowTakes);
    let r = net_with(&fake, FailurePolicy::Deny, 100);
    let token = CancellationToken::new();
    connected(&r, &token).await;
    let hot = || Increment {
        leasable: true,
        limit: 1000,
        ..inc("hot")
    };
    // A plain count, a take of 2 and a request served from it.
    for want in [Tally::Count(1), Tally::Leased(2), Tally::Leased(3)] {
        assert_eq!(r.increment(&[hot()]).await.unwrap(), [want]);
    }
    let take = tokio::spawn({
        let r = r.clone();
        async move { r.increment(&[hot()]).await }
    });
    assert!(called(&fake, 3).await, "the take of 4 is counted");
    // Other instances spend the rest of the window.
    *fake.counts.lock().unwrap().values_mut().next().unwrap() = 1000;
    let mut behind = Vec::new();
    for calls in [4, 5] {
        let r = r.clone();
        behind.push(tokio::spawn(async move { r.increment(&[hot()]).await }));
        assert!(
            called(&fake, calls).await,
            "asked of the store, not the cache"
        );
    }
    assert!(
        behind.iter().all(|b| !b.is_finished()),
        "waiting for the take"
    );
    assert_eq!(take.await.unwrap().unwrap(), [Tally::Leased(4)]);
    let mut got = Vec::new();
    for b in behind {
        got.extend(b.await.unwrap().unwrap());
    }
    assert_eq!(got, [Tally::Leased(5), Tally::Leased(6)]);
    assert_eq!(r.increment(&[hot()]).await.unwrap(), [Tally::Leased(7)]);
    token.cancel();
}
