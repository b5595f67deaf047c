//! Whose a store wait that ran out was: the store's (a fault for the
//! breaker, decided by the failure policy) or sluice's own (its queue, its
//! CPU: shed, the store's health not in question).
//!
//! The evidence is a clock that runs on time: a call the store left
//! unanswered for half the wait, plus however late the thread that reads
//! its replies is running, was the store's doing; a reply read late by a
//! starved thread is not. Evidence can still mislead on a host loaded past
//! every measure, so silence decides in the end: once the store has answered
//! nothing at all for [`SILENCE_BOUND`] since a wait was first judged
//! sluice's own, every wait that runs out is the store's. A store that
//! answers no one is thus found out within that bound, plus how late the
//! thread that would read its answers runs, plus the waits that trip the
//! breaker, whatever the host's load.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

use super::{QUIET, Resilient};

/// How long a store may answer nothing at all before its waits are its own
/// fault, whatever the evidence of sluice's lateness.
pub(crate) const SILENCE_BOUND: Duration = Duration::from_secs(1);

/// Who a wait that ran out is put down to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blame {
    /// sluice ran late: shed the request, tell the breaker nothing.
    Sluice,
    /// The store: a fault, and the failure policy decides.
    Store,
}

/// The store's silence since a wait was first put down to sluice.
#[derive(Debug)]
pub(super) struct Silence {
    base: Instant,
    /// Milliseconds after `base`, plus one, of the first wait put down to
    /// sluice since the store last answered; 0 while it answers.
    since: AtomicU64,
}

impl Silence {
    pub(super) fn new() -> Silence {
        Silence {
            base: Instant::now(),
            since: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The store answered (counts, or an error in its own words): it is
    /// not silent. A load first, so the hot path writes nothing shared.
    pub(super) fn answered(&self) {
        if self.since.load(Relaxed) != 0 {
            self.since.store(0, Relaxed);
        }
    }

    /// A wait ran out; `sluices_own` is what the evidence says of it,
    /// `reader_late` how late the thread that reads the store's replies
    /// runs now, and `heard(d)` whether the store was heard answering any
    /// call in the last `d` (a store whose replies reach sluice late, on a
    /// host too loaded for any request to get its answer in time, is
    /// answering: its silence starts again, so only a store that answered
    /// nothing for the whole bound is found silent). Silence the reader's
    /// lateness explains is not the store's: its answers may be waiting,
    /// unread, in their sockets (a flood queued a second on the workers,
    /// and a memcached answering every call was found silent).
    pub(super) fn ran_out(
        &self,
        sluices_own: bool,
        reader_late: Duration,
        heard: impl Fn(Duration) -> bool,
    ) -> Blame {
        if !sluices_own {
            return Blame::Store;
        }
        let now = self.now_ms() + 1;
        let since = match self.since.compare_exchange(0, now, Relaxed, Relaxed) {
            Ok(_) => now,
            Err(earlier) => earlier,
        };
        let silent = now.saturating_sub(since);
        let bound = u64::try_from((SILENCE_BOUND + reader_late).as_millis()).unwrap_or(u64::MAX);
        if silent < bound {
            return Blame::Sluice;
        }
        if heard(Duration::from_millis(silent)) {
            self.since.store(now, Relaxed);
            return Blame::Sluice;
        }
        Blame::Store
    }
}

impl Resilient {
    /// Whose a wait that ran out was ([`blame`]): the store's when it is
    /// silent on a clock that runs on time (a call unanswered for half the
    /// wait, at least [`QUIET`], and no other answered meanwhile), or when
    /// it has answered nothing for too long; sluice's own otherwise (a
    /// store that answers late, starved of CPU on a loaded host, is slow,
    /// not down). A store that cannot tell is judged by how late the
    /// workers run. A store heard answering within that time is not
    /// silent, so the silence bound does not run against it.
    pub(super) fn blame(&self, wait: Duration) -> Blame {
        let late = self.lag.late_now();
        let at_least = (wait / 2).max(QUIET);
        let own = match self.primary.stalled(at_least, late) {
            Some(stalled) => !stalled,
            None => late * 2 >= wait,
        };
        let reader_late = self.primary.hearing(late).map_or(late, |h| h.reader_late);
        // Heard answering, if only requests that had given up: not silent
        // (a flood can leave every wait running out on a store that
        // answers them all, late).
        self.silence.ran_out(own, reader_late, |within| {
            self.primary.answered_within(within)
        })
    }

    /// A timeout's reason, with what the store's clocks said of it: an
    /// operator reading "no answer within 50 ms" can tell a store silent
    /// for a second from one silent just past [`QUIET`].
    pub(super) fn timeout_reason(&self) -> String {
        let ms = self.timeout.as_millis();
        let late = self.lag.late_now();
        match self.primary.hearing(late) {
            Some(h) => format!(
                "no answer within {ms} ms ({h}, the workers {} ms late)",
                late.as_millis()
            ),
            None => format!("no answer within {ms} ms"),
        }
    }
}

#[cfg(test)]
#[path = "blame_tests.rs"]
mod tests;
