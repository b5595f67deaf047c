//! A quota stream's decisions, pure: the domain it is bound to, the buckets
//! it knows and when each was last reported and last busy, when a bucket is
//! gone (not reported for three TTLs) or abandoned (reported idle past
//! `--quota-abandon-after`), that a rule reload drops what Envoy holds, the
//! order renewals are made in, and what the farewell renews. Time comes in
//! as `now` and decisions go out as values; the shell (`stream.rs`) does
//! tonic, the store, the budgets and the gauges, and keeps its own per-bucket
//! part in `shell`.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::quota::estimate::Estimate;
use crate::quota::share::Assignment;
use crate::quota::usage::Measured;

/// A bucket's id, its entries sorted.
pub(super) type Key = Vec<(String, String)>;

/// One bucket as the stream knows it.
pub(super) struct Tracked<X> {
    /// The demand claimed for the bucket (see [`Estimate::claim`]), or
    /// UNKNOWN until a report was measured.
    pub(super) demand: f64,
    /// The reports so far, smoothed.
    pub(super) estimate: Estimate,
    pub(super) last_report: Instant,
    /// The last gap between two of its reports: a client may report each
    /// bucket at its own `reporting_interval`, so "gone" is judged by it.
    pub(super) cadence: Duration,
    pub(super) last_busy: Instant,
    /// What Envoy holds from us.
    pub(super) held: Option<Assignment>,
    /// When this stream last wrote its demand to the bucket's table.
    pub(super) written: Option<Instant>,
    /// The shell's part (its target, its place under the caps).
    pub(super) shell: X,
}

/// Why a bucket leaves the stream on the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Envoy stopped reporting it: it forgot the bucket.
    Gone,
    /// Reported, but idle too long: Envoy is told to abandon it.
    Abandoned,
}

/// The stream's state.
pub(super) struct State<X> {
    domain: Option<String>,
    pub(super) buckets: HashMap<Key, Tracked<X>>,
    generation: u64,
}

impl<X> State<X> {
    /// A stream that has seen nothing yet, under rules of `generation`.
    pub(super) fn new(generation: u64) -> State<X> {
        State {
            domain: None,
            buckets: HashMap::new(),
            generation,
        }
    }

    /// The domain a report names: the first binds the stream, and a later
    /// report names the same or none at all (`rlqs.proto`: the domain
    /// "should only be provided in the first report; all subsequent messages
    /// on the same stream are considered to be in the same domain"). `Err`
    /// is the message the stream ends with.
    pub(super) fn domain(&mut self, named: &str) -> Result<String, String> {
        match &self.domain {
            None if named.is_empty() => {
                Err("the first usage report on a stream must name the domain".into())
            }
            None => {
                self.domain = Some(named.to_owned());
                Ok(named.to_owned())
            }
            Some(known) if named.is_empty() || known == named => Ok(known.clone()),
            Some(known) => Err(format!(
                "the stream's domain is '{known:.64}'; a report named '{named:.64}'"
            )),
        }
    }

    pub(super) fn knows(&self, key: &Key) -> bool {
        self.buckets.contains_key(key)
    }

    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// A bucket first reported at `now`; its demand is not known yet.
    pub(super) fn insert(&mut self, key: Key, shell: X, unknown: f64, now: Instant) {
        self.buckets.insert(
            key,
            Tracked {
                demand: unknown,
                estimate: Estimate::default(),
                last_report: now,
                cadence: Duration::ZERO,
                last_busy: now,
                held: None,
                written: None,
                shell,
            },
        );
    }

    /// A report of `key` at `now`: `busy` when it carried requests, and the
    /// requests offered over the seconds they came in, when measured.
    /// Returns the shell's part.
    pub(super) fn report(
        &mut self,
        key: &Key,
        busy: bool,
        measured: Option<Measured>,
        now: Instant,
    ) -> Option<&mut X> {
        let b = self.buckets.get_mut(key)?;
        let gap = now.saturating_duration_since(b.last_report);
        b.cadence = gap;
        b.last_report = now;
        if busy {
            b.last_busy = now;
        }
        if let Some(m) = measured {
            b.estimate.add(m.requests, interval(m, gap.as_secs_f64()));
            b.demand = b.estimate.claim();
        }
        Some(&mut b.shell)
    }

    /// Rules of `generation` are live. When they changed, every bucket is
    /// handed to `rebind` with what Envoy held (its rule may be another now),
    /// and holds nothing afterwards, so the next assignment is pushed.
    pub(super) fn reload(
        &mut self,
        generation: u64,
        mut rebind: impl FnMut(&str, &Key, Option<&Assignment>, &mut X),
    ) -> bool {
        if generation == self.generation {
            return false;
        }
        self.generation = generation;
        let Some(domain) = self.domain.as_deref() else {
            return true;
        };
        for (key, b) in &mut self.buckets {
            rebind(domain, key, b.held.as_ref(), &mut b.shell);
            b.held = None;
        }
        true
    }

    /// Takes out the buckets that end at `now`: gone first (no report for
    /// three TTLs, or three of its own reporting intervals when longer, up
    /// to `abandon_after`), then abandoned (no requests for `abandon_after`).
    pub(super) fn expire(
        &mut self,
        now: Instant,
        ttl: Duration,
        abandon_after: Duration,
    ) -> Vec<(Key, Tracked<X>, Ending)> {
        let (mut gone, mut idle) = (Vec::new(), Vec::new());
        for (key, b) in &self.buckets {
            let cadence = b.cadence.min(abandon_after).max(ttl);
            if now.duration_since(b.last_report) > cadence * 3 {
                gone.push(key.clone());
            } else if now.duration_since(b.last_busy) > abandon_after {
                idle.push(key.clone());
            }
        }
        let ending = |keys: Vec<Key>, why| keys.into_iter().map(move |k| (k, why));
        let mut out = Vec::new();
        for (key, why) in ending(gone, Ending::Gone).chain(ending(idle, Ending::Abandoned)) {
            if let Some(b) = self.buckets.remove(&key) {
                out.push((key, b, why));
            }
        }
        out
    }

    /// Every bucket, those written longest ago (or never) first: the order
    /// the timer renews them in while the store budgets last.
    pub(super) fn renewal_order(&self) -> Vec<Key> {
        let mut keys: Vec<_> = self.buckets.iter().map(|(k, b)| (b.written, k)).collect();
        keys.sort_unstable_by_key(|(written, _)| *written);
        keys.into_iter().map(|(_, k)| k.clone()).collect()
    }

    /// What the farewell renews: every assignment Envoy holds, so it keeps
    /// enforcing its share for one more TTL while it reconnects elsewhere.
    pub(super) fn farewell(&self) -> Vec<(&Key, Assignment)> {
        self.buckets
            .iter()
            .filter_map(|(k, b)| b.held.map(|h| (k, h)))
            .collect()
    }

    /// Every bucket, taken out: the stream has ended.
    pub(super) fn drain(&mut self) -> Vec<Tracked<X>> {
        self.buckets.drain().map(|(_, b)| b).collect()
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;

/// The seconds a report covers. A client that keeps `time_elapsed` to the
/// nanosecond is taken at its word. Envoy 1.40 sends whole seconds, cut
/// down (a 4.9 s interval reads 4 s, a quarter more requests a second than
/// were sent), so for a whole figure the time since the bucket's last report
/// on this stream, by our clock, is taken when it agrees with the client's
/// to within the second it drops; otherwise the client's figure (a first
/// report, or one delayed past its interval).
fn interval(m: Measured, since_last: f64) -> f64 {
    let reported = m.seconds;
    if m.whole_seconds && (reported - 0.25..=reported + 1.25).contains(&since_last) {
        since_last
    } else {
        reported
    }
}
