//! Keeping what the store said of a counter: a take's lease replaces the
//! entry (a segment queued ahead and the key's rate carried over), a plain
//! answer renews or voids it, and a full shard makes room only from an idle
//! entry.

use std::collections::HashMap;

use super::lease::Lease;
use super::{Allowance, SAMPLE, Source};
use crate::{CounterKey, Increment};

impl Allowance {
    /// Keeps what the store said for `inc`: a take's lease replaces the
    /// counter's entry; a plain answer renews or voids it ([`Self::renew`]).
    pub(super) fn remember(&self, inc: &Increment, lease: Lease, source: Source) {
        let mut map = self.shard(&inc.key).lock();
        match (map.get_mut(&inc.key), source) {
            (Some(l), Source::Plain) => self.renew(l, inc, lease),
            (Some(l), Source::Take) => {
                // A segment queued ahead of the same window stays queued, a
                // take ahead in flight stays the only one, and the key's
                // rate runs on.
                let same = l.start == lease.start;
                let queued = l.ahead.take().filter(|_| same);
                self.strand(l);
                self.owe_left(l);
                let (since_us, spent) = if same {
                    (l.since_us, l.spent.saturating_add(lease.spent))
                } else {
                    (lease.since_us, lease.spent)
                };
                *l = Lease {
                    ahead: queued,
                    renewing_us: l.renewing_us,
                    taken_us: lease.taken_us.max(queued.map_or(0, |(_, _, t)| t)),
                    since_us,
                    spent,
                    ..lease
                };
                self.land(&inc.key);
            }
            (None, _) => {
                if map.len() >= self.per_shard && !self.make_room(&mut map) {
                    // Every sampled entry holds leased hits: the newcomer
                    // is not remembered (a take's hits are stranded).
                    self.strand(&lease);
                    self.owe_left(&lease);
                    return;
                }
                map.insert(inc.key.clone(), lease);
            }
        }
    }

    /// A plain answer for a counter whose lease `l` has positions left,
    /// asked after the lease was had: the store's count before this request
    /// at or past the lease's last position says nothing took them back, so
    /// the lease is trusted anew; a count below it (a reset, or refunds
    /// through other instances) voids the lease. An answer to a request
    /// older than the lease says nothing of it.
    fn renew(&self, l: &mut Lease, inc: &Increment, plain: Lease) {
        let after = plain.seen;
        if l.start == inc.window.start && l.left() > 0 {
            let older = inc.at_us < l.at_us;
            if older || after.saturating_sub(inc.hits) >= l.last {
                if !older {
                    l.at_us = inc.at_us;
                }
                l.seen = l.seen.max(after);
                return;
            }
        }
        self.strand(l);
        // The chunk the key had grown to stays (in its window): under many
        // requests at once, each answered plainly while a take was in
        // flight, it would start over at 1 with every answer, and the lease
        // never grow past what one take's waiters spend at once.
        let chunk = if l.start == plain.start {
            l.chunk.max(plain.chunk)
        } else {
            plain.chunk
        };
        *l = Lease {
            taking_us: l.taking_us,
            renewing_us: l.renewing_us,
            chunk,
            ..plain
        };
    }

    /// Drops one idle entry of a full shard, among the first [`SAMPLE`]:
    /// a flood of new keys never strands another counter's leased hits.
    /// False when none is idle.
    fn make_room(&self, map: &mut HashMap<CounterKey, Lease>) -> bool {
        let idle = map
            .iter()
            .take(SAMPLE)
            .find(|(_, l)| l.idle())
            .map(|(k, _)| k.clone());
        idle.and_then(|k| map.remove(&k)).is_some()
    }
}
