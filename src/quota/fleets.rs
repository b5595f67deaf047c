//! Fleets this instance read lately, shared by its streams: when many Envoys
//! on one instance report the same bucket, their timers read its table from
//! the store once per half interval between them, not once each. A stream
//! still writes its own demand on every report, and at least every third of
//! the assignment TTL, so its entry never expires while it lives.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::store::demand::MemberDemand;

/// Tables remembered at most; past it, stale ones go, then everything.
const MAX_TABLES: usize = 100_000;

/// A fleet as read, and when.
type Read = (Instant, Arc<[MemberDemand]>);

#[derive(Debug, Default)]
pub(super) struct Fleets {
    tables: Mutex<HashMap<String, Read>>,
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
        let (at, members) = tables.get(table)?;
        if at.elapsed() > fresh {
            return None;
        }
        let mut out: Vec<MemberDemand> = members.to_vec();
        match out.iter_mut().find(|m| m.member == member) {
            Some(m) => m.demand = demand,
            None => out.push(MemberDemand { member, demand }),
        }
        Some(out)
    }

    pub(super) fn put(&self, table: &str, members: &[MemberDemand], fresh: Duration) {
        let mut tables = self.tables.lock();
        if tables.len() >= MAX_TABLES && !tables.contains_key(table) {
            tables.retain(|_, (at, _)| at.elapsed() <= fresh);
            if tables.len() >= MAX_TABLES {
                tables.clear();
            }
        }
        tables.insert(table.to_owned(), (Instant::now(), Arc::from(members)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_fresh_fleet_is_shared_with_the_readers_own_demand() {
        let f = Fleets::default();
        let fresh = Duration::from_millis(500);
        f.put(
            "t",
            &[MemberDemand {
                member: 1,
                demand: 4.0,
            }],
            fresh,
        );
        let got = f.get("t", fresh, 2, 1.0).unwrap();
        assert_eq!(got.len(), 2);
        let own = f.get("t", fresh, 1, 9.0).unwrap();
        assert_eq!(
            own,
            vec![MemberDemand {
                member: 1,
                demand: 9.0
            }]
        );
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(f.get("t", fresh, 2, 1.0).is_none());
    }
}
