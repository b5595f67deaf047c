//! When calls to a store that answers on the caller's own connection
//! (memcached, a Redis Cluster through its client) were sent and answered, so a wait that ran out can tell a
//! store that answers nothing (a call unanswered for the whole wait, and no
//! other answered meanwhile) from one that is slow but answering (throttled,
//! or starved of CPU on a loaded host). Redis's batcher keeps its own
//! (`batch.rs`), as its calls outlive the requests that wait on them.
//!
//! A call whose caller gave up (the store timeout drops it) stays
//! unanswered until the store answers anything: it was sent, and the store
//! has said nothing since. Where the caller is the only reader of its
//! answer (memcached), the answer is still listened for, by a
//! [`Listening`] of its own, so a store whose every answer comes after its
//! caller left (a flood that spends each wait in sluice's own queue) is
//! heard answering, not taken for silent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

/// Times are milliseconds after `base`, plus one; 0 is none.
#[derive(Debug)]
pub(crate) struct Calls {
    base: Instant,
    in_flight: AtomicU64,
    /// The first call sent since the store last answered.
    first_sent: AtomicU64,
    /// The earliest call given up on since the store last answered.
    abandoned: AtomicU64,
    answered_at: AtomicU64,
    /// Answers to given-up calls being listened for, and how many may be.
    listening: AtomicUsize,
    listen_limit: usize,
}

impl Calls {
    /// Calls whose given-up answers nobody listens for (their caller's
    /// client reads them anyway: a Cluster's).
    pub(crate) fn new() -> Calls {
        Calls::listening_for(0)
    }

    /// Calls whose given-up answers are listened for, `limit` at once.
    pub(crate) fn listening_for(limit: usize) -> Calls {
        Calls {
            base: Instant::now(),
            in_flight: AtomicU64::new(0),
            first_sent: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            answered_at: AtomicU64::new(0),
            listening: AtomicUsize::new(0),
            listen_limit: limit,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).map_or(u64::MAX, |ms| ms + 1)
    }

    /// A call was sent: its stamp, for [`answered`](Self::answered) or
    /// [`abandoned`](Self::abandoned).
    pub(crate) fn sent(&self) -> u64 {
        let now = self.now();
        self.in_flight.fetch_add(1, Relaxed);
        let _ = self.first_sent.compare_exchange(0, now, Relaxed, Relaxed);
        now
    }

    /// The store answered a call (counts, or an error in its own words).
    pub(crate) fn answered(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
        self.answer_heard();
    }

    /// The store was heard answering, a call given up on included.
    fn answer_heard(&self) {
        self.answered_at.store(self.now(), Relaxed);
        self.first_sent.store(0, Relaxed);
        self.abandoned.store(0, Relaxed);
    }

    /// The caller of the call sent at `sent` gave up on it unanswered.
    pub(crate) fn abandoned(&self, sent: u64) {
        self.in_flight.fetch_sub(1, Relaxed);
        let _ = self
            .abandoned
            .fetch_update(Relaxed, Relaxed, |a| (a == 0 || sent < a).then_some(sent));
    }

    /// Leave to listen for the answer of a call given up on, while fewer
    /// than the limit are listened for; `None` past it.
    pub(crate) fn listen(self: &Arc<Self>) -> Option<Listening> {
        self.listening
            .fetch_update(Relaxed, Relaxed, |n| {
                (n < self.listen_limit).then_some(n + 1)
            })
            .ok()?;
        Some(Listening(self.clone()))
    }

    /// A call sent now, answered by [`Call::answered`] or abandoned when
    /// dropped first (its caller gave up).
    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            calls: self,
            sent: self.sent(),
        }
    }

    /// [`stalled`](Self::stalled) for a store whose replies are read on
    /// the workers (`workers_late` is how late they run now): a reply waits
    /// in the socket for as long as they run late, so that is added; and
    /// while they run late by half of `at_least` or more, an answer cannot
    /// be heard in time to tell, so `None` (lateness decides).
    pub(crate) fn heard(&self, at_least: Duration, workers_late: Duration) -> Option<bool> {
        (workers_late * 2 < at_least).then(|| self.stalled(at_least + workers_late))
    }

    /// Whether the store answered some call in the last `within`.
    pub(crate) fn answered_within(&self, within: Duration) -> bool {
        let at = self.answered_at.load(Relaxed);
        let within = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        at != 0 && self.now().saturating_sub(at) < within
    }

    /// Whether the store is silent: some call has been unanswered for at
    /// least `wait`, and no call was answered in that time either.
    pub(crate) fn stalled(&self, wait: Duration) -> bool {
        self.silence().is_some_and(|s| s >= wait)
    }

    /// How long the store has been silent with a call out or given up on
    /// unanswered: since the earliest such call, or since the last answer
    /// if that is later; `None` when nothing is owed.
    pub(crate) fn silence(&self) -> Option<Duration> {
        let now = self.now();
        let answered = self.answered_at.load(Relaxed);
        let mut oldest = self.abandoned.load(Relaxed);
        if self.in_flight.load(Relaxed) > 0 {
            // Sent before the last answer: silence counts from the answer.
            let sent = self.first_sent.load(Relaxed);
            let sent = if sent == 0 { answered.max(1) } else { sent };
            oldest = if oldest == 0 { sent } else { oldest.min(sent) };
        }
        (oldest != 0).then(|| Duration::from_millis(now.saturating_sub(oldest.max(answered))))
    }
}

/// Listening for the answer to a call given up on (see [`Calls::listen`]).
pub(crate) struct Listening(Arc<Calls>);

impl Listening {
    /// The answer came: the store is heard, however late.
    pub(crate) fn heard(self) {
        self.0.answer_heard();
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.listening.fetch_sub(1, Relaxed);
    }
}

/// One call in flight (see [`Calls::call`]).
pub(crate) struct Call<'a> {
    calls: &'a Calls,
    sent: u64,
}

impl Call<'_> {
    pub(crate) fn answered(mut self) {
        self.sent = 0;
        self.calls.answered();
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.sent != 0 {
            self.calls.abandoned(self.sent);
        }
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
