//! Fleets this instance read lately, shared by its streams: when many Envoys
//! on one instance report the same bucket, their timers read its table from
//! the store once per half interval between them, not once each. A stream
//! still writes its own demand on every report, and at least every third of
//! the assignment TTL, so its entry never expires while it lives. The split
//! of a read is made once and shared too: a thousand Envoys on one bucket
//! would otherwise each sort the thousand demands every rebalance interval
//! (`make fleet` measured 0.38 of a core for that, against 0.15).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::share::split;
use crate::store::demand::{MemberDemand, STORED_WITHIN};

/// Tables remembered at most; past it, stale ones go, then everything.
const MAX_TABLES: usize = 100_000;

/// A fleet as read, when, and its split once made (with the rate it split).
struct Read {
    at: Instant,
    members: Arc<[MemberDemand]>,
    shares: Option<(f64, Arc<[f64]>)>,
}

#[derive(Default)]
pub(super) struct Fleets {
    tables: Mutex<HashMap<String, Read>>,
    /// Tables a stream's timer is reading now, and since when: streams
    /// whose timers fire together (Envoys that connected at once, as after
    /// a restart) would otherwise all find no fresh read and all call.
    reading: Mutex<HashMap<String, Instant>>,
}

impl Fleets {
    /// The fleet of `table` if read within `fresh`, with `member`'s own
    /// demand put in (it may have changed since).
    pub(super) fn get(
        &self,
        table: &str,
        fresh: Duration,
        member: u64,
        demand: f64,
    ) -> Option<Vec<MemberDemand>> {
        let tables = self.tables.lock();
        let read = fresh_read(&tables, table, fresh)?;
        let mut out: Vec<MemberDemand> = read.members.to_vec();
        match out.iter_mut().find(|m| m.member == member) {
            Some(m) => m.demand = demand,
            None => out.push(MemberDemand { member, demand }),
        }
        Some(out)
    }

    /// `member`'s share of `rate` and the fleet's size, from the fleet of
    /// `table` read within `fresh`, when that read holds `member` with the
    /// `demand` it has now (else [`Fleets::get`] and a split of its own).
    pub(super) fn share(
        &self,
        table: &str,
        fresh: Duration,
        member: u64,
        demand: f64,
        rate: f64,
    ) -> Option<(f64, usize)> {
        let (members, shares) = {
            let tables = self.tables.lock();
            let read = fresh_read(&tables, table, fresh)?;
            let shares = read
                .shares
                .as_ref()
                .filter(|(r, _)| *r == rate)
                .map(|(_, s)| s.clone());
            (read.members.clone(), shares)
        };
        // As read back: Redis rounds what it was written.
        let at = members
            .iter()
            .position(|m| m.member == member && (m.demand - demand).abs() <= STORED_WITHIN)?;
        let shares = match shares {
            Some(s) => s,
            None => {
                // Made outside the lock; two streams may both make it.
                let s: Arc<[f64]> = Arc::from(split(rate, &members));
                if let Some(read) = self.tables.lock().get_mut(table)
                    && Arc::ptr_eq(&read.members, &members)
                {
                    read.shares = Some((rate, s.clone()));
                }
                s
            }
        };
        Some((*shares.get(at)?, members.len()))
    }

    /// Whether the caller may read `table` now: false while another
    /// stream's read of it, begun within `fresh`, is in flight. The one
    /// that may read shares what it reads through [`Fleets::put`].
    pub(super) fn claim(&self, table: &str, fresh: Duration) -> bool {
        let mut reading = self.reading.lock();
        if reading.get(table).is_some_and(|at| at.elapsed() <= fresh) {
            return false;
        }
        bound(&mut reading, table, |at| at.elapsed() <= fresh);
        reading.insert(table.to_owned(), Instant::now());
        true
    }

    /// Ends a [`Fleets::claim`]: the read was made (and put, if it read
    /// a fleet), failed, or was deferred by the budgets. Either way the
    /// other streams need not wait on it.
    pub(super) fn release(&self, table: &str) {
        self.reading.lock().remove(table);
    }

    pub(super) fn put(&self, table: &str, members: &[MemberDemand], fresh: Duration) {
        let mut tables = self.tables.lock();
        bound(&mut tables, table, |read| read.at.elapsed() <= fresh);
        let read = Read {
            at: Instant::now(),
            members: Arc::from(members),
            shares: None,
        };
        tables.insert(table.to_owned(), read);
    }
}

/// Room for `table` in `map` within [`MAX_TABLES`]: stale entries go,
/// then everything.
fn bound<V>(map: &mut HashMap<String, V>, table: &str, fresh: impl Fn(&V) -> bool) {
    if map.len() >= MAX_TABLES && !map.contains_key(table) {
        map.retain(|_, v| fresh(v));
        if map.len() >= MAX_TABLES {
            map.clear();
        }
    }
}

/// The read of `table`, if made within `fresh`.
fn fresh_read<'a>(
    tables: &'a HashMap<String, Read>,
    table: &str,
    fresh: Duration,
) -> Option<&'a Read> {
    tables.get(table).filter(|read| read.at.elapsed() <= fresh)
}

#[cfg(test)]
#[path = "fleets_tests.rs"]
mod tests;
