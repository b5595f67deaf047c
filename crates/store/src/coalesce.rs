//! Increments of one batch that hit the same counter become one increment.
//!
//! Under load a hot key is in most requests of a batch. Sent once with the
//! sum of their hits, it costs Redis one `INCRBY` and one `EXPIRE` where it
//! paid one of each per request, and the key crosses the wire once. Each
//! request still gets the count it would have got had the increments run one
//! after another in batch order: the count after the merged increment, less
//! the hits of the requests after it.
//!
//! Token buckets are never merged: each one's decision depends on the bucket
//! the one before it left. Nor are refunds (kinds past the bucket's), whose
//! floor at 0 would not split back into per-request counts.

use super::StoreError;
use super::script::{ANSWERS, Op, add_args};

/// Batches are small and their keys are ours: a fast, unkeyed-enough hash.
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The script's kind of a token bucket (see [`super::script`]).
const BUCKET: u64 = 2;

/// What one script call runs for a batch, and how its answers go back to the
/// batch's increments.
pub(super) struct Coalesced<'a> {
    /// One per distinct counter, in order of first appearance.
    merged: Vec<Merged<'a>>,
    /// Per original increment, in order: the merged increment that answers
    /// it and the hits added after its own within that one.
    shares: Vec<Share>,
}

struct Merged<'a> {
    keys: &'a [String],
    args: [u64; 7],
    slot: &'a str,
}

struct Share {
    merged: usize,
    /// Hits up to and including this increment's own.
    through: u64,
}

impl<'a> Coalesced<'a> {
    /// Merges `ops` (`n` of them) that add to the same counter with the
    /// same shape.
    pub(super) fn new(ops: impl Iterator<Item = &'a Op>, n: usize) -> Coalesced<'a> {
        let mut merged: Vec<Merged<'a>> = Vec::with_capacity(n);
        let mut shares = Vec::with_capacity(n);
        let mut index: FastMap<(u64, &'a [String]), usize> =
            FastMap::with_capacity_and_hasher(n, Default::default());
        for op in ops {
            let [kind, hits, ttl, ..] = op.args;
            let same = if kind >= BUCKET {
                None
            } else {
                index.get(&(kind, op.keys.as_slice())).copied()
            };
            let found = same
                .and_then(|i| merged.get_mut(i).map(|m| (i, m)))
                // A sum past i64 would be refused by INCRBY for every request
                // in it; such hits are sent on their own instead.
                .filter(|(_, m)| m.args[1].checked_add(hits).is_some_and(fits));
            match found {
                Some((i, m)) => {
                    m.args[1] += hits;
                    // Increments of one counter made a moment apart may see
                    // different times to the window's end; keep the longest.
                    m.args[2] = m.args[2].max(ttl);
                    shares.push(Share {
                        merged: i,
                        through: m.args[1],
                    });
                }
                None => {
                    let i = merged.len();
                    if kind < BUCKET {
                        index.insert((kind, op.keys.as_slice()), i);
                    }
                    merged.push(Merged {
                        keys: &op.keys,
                        args: op.args,
                        slot: op.slot.as_deref().unwrap_or_default(),
                    });
                    shares.push(Share {
                        merged: i,
                        through: hits,
                    });
                }
            }
        }
        Coalesced { merged, shares }
    }

    /// Adds the merged increments' keys and arguments to an invocation.
    pub(super) fn add_to(&self, inv: &mut redis::ScriptInvocation<'_>) {
        for m in &self.merged {
            for key in m.keys {
                inv.key(key);
            }
            add_args(inv, &m.args, m.slot);
        }
    }

    /// The answers per original increment, from the script's per merged
    /// one. A reply of the wrong length is the store's fault.
    pub(super) fn answers(&self, raw: &[i64]) -> Result<Vec<i64>, StoreError> {
        super::same_length(raw.len(), self.merged.len() * ANSWERS)?;
        let mut out = Vec::with_capacity(self.shares.len() * ANSWERS);
        for share in &self.shares {
            let i = share.merged;
            let (Some(&[a, b, c]), Some(m)) = (
                raw.get(ANSWERS * i..ANSWERS * (i + 1))
                    .and_then(|r| <&[i64; ANSWERS]>::try_from(r).ok()),
                self.merged.get(i),
            ) else {
                return Err(StoreError::BadReply("short reply".into()));
            };
            let after = m.args[1] - share.through;
            // Negative answers are the script's refusals (overflow, not a
            // counter): every request on that counter gets them as they are.
            let a = if m.args[0] >= BUCKET || a < 0 {
                a
            } else {
                a.saturating_sub(i64::try_from(after).unwrap_or(i64::MAX))
            };
            out.extend([a, b, c]);
        }
        Ok(out)
    }
}

fn fits(hits: u64) -> bool {
    i64::try_from(hits).is_ok()
}

#[cfg(test)]
#[path = "coalesce_tests.rs"]
mod tests;
