//! Demand tables for quota mode: each Envoy that reports a quota bucket
//! writes its recent demand (requests per second) under the bucket's table,
//! and reads every live member's back, so every sluice instance on one store
//! sizes its Envoys' shares from the same fleet. A member's entry expires
//! unless refreshed, so an Envoy that vanishes (or a sluice that dies with
//! its streams) gives its share back within one TTL.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{FailurePolicy, StoreError};

/// One member's write to a bucket's table.
#[derive(Debug, Clone)]
pub struct DemandUpdate {
    /// The table, already free of personal data (a digest of the bucket).
    pub table: String,
    /// The member: one Envoy stream, unique across instances.
    pub member: u64,
    /// Requests per second offered (allowed + denied); [`UNKNOWN`] for a
    /// member that has not reported a measured interval yet; `None` leaves.
    pub demand: Option<f64>,
    /// How long the entry lives unless written again.
    pub ttl: Duration,
    /// The rule's `on_store_failure`, over the server's `--store-failure`.
    pub on_failure: Option<FailurePolicy>,
}

/// The demand of a member that has not measured one yet.
pub const UNKNOWN: f64 = -1.0;

/// How far a demand read back may be from the one written: Redis keeps it
/// to three decimals.
pub const STORED_WITHIN: f64 = 0.0005;

/// A live member of a table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberDemand {
    pub member: u64,
    /// Requests per second, or [`UNKNOWN`].
    pub demand: f64,
}

/// What a store answers for a demand update.
#[derive(Debug, Clone, PartialEq)]
pub enum Fleet {
    /// The live members, the writer included (unless it left).
    Members(Vec<MemberDemand>),
    /// The store is down and the policy admits everything.
    Allow,
    /// The store is down and the policy refuses everything.
    Deny,
}

/// Members one table may hold; more writers are refused (each is a stream,
/// which `--quota-max-streams` bounds per instance).
const MAX_MEMBERS: usize = 4096;

#[derive(Debug)]
struct Entry {
    demand: f64,
    expires: Instant,
}

/// Demand tables in this process's memory: the memory store's, and the
/// fallback of a shared store (then shares are per instance).
#[derive(Debug)]
pub struct DemandTables {
    tables: Mutex<HashMap<String, HashMap<u64, Entry>>>,
    max_tables: usize,
}

impl DemandTables {
    pub fn new(max_tables: usize) -> DemandTables {
        DemandTables {
            tables: Mutex::new(HashMap::new()),
            max_tables: max_tables.max(1),
        }
    }

    /// Writes the update and returns the table's live members.
    pub fn update(&self, u: &DemandUpdate) -> Result<Vec<MemberDemand>, StoreError> {
        let now = Instant::now();
        let mut tables = self.tables.lock();
        if !tables.contains_key(&u.table) && tables.len() >= self.max_tables {
            tables.retain(|_, t| {
                t.retain(|_, e| e.expires > now);
                !t.is_empty()
            });
            if tables.len() >= self.max_tables {
                return Err(StoreError::Rejected(format!(
                    "{} quota buckets in memory already",
                    self.max_tables
                )));
            }
        }
        let table = tables.entry(u.table.clone()).or_default();
        table.retain(|_, e| e.expires > now);
        match u.demand {
            Some(demand) if table.len() < MAX_MEMBERS || table.contains_key(&u.member) => {
                table.insert(
                    u.member,
                    Entry {
                        demand,
                        expires: now + u.ttl,
                    },
                );
            }
            Some(_) => {
                return Err(StoreError::Rejected(format!(
                    "{MAX_MEMBERS} members in one quota bucket already"
                )));
            }
            None => {
                table.remove(&u.member);
            }
        }
        let members = table
            .iter()
            .map(|(m, e)| MemberDemand {
                member: *m,
                demand: e.demand,
            })
            .collect();
        if table.is_empty() {
            tables.remove(&u.table);
        }
        Ok(members)
    }

    /// Tables held, for tests and gauges.
    pub fn len(&self) -> usize {
        self.tables.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The Redis side: one hash per table, a field per member holding
/// `demand:expiry-ms` by the server's clock, expired fields dropped on every
/// call, the hash itself expiring when no member writes any more.
pub(super) const SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. (now + ttl))
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, ':', 1, true)
  local exp = sep and tonumber(string.sub(v, sep + 1)) or 0
  if exp <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = string.sub(v, 1, sep - 1)
  end
end
if #out > 0 then redis.call('PEXPIRE', KEYS[1], ttl * 2) end
return out
";

/// Decodes the script's flat `member, demand, ...` answer.
pub(super) fn decode(raw: &[String]) -> Result<Vec<MemberDemand>, StoreError> {
    raw.chunks(2)
        .map(|pair| match pair {
            [m, d] => match (m.parse::<u64>(), d.parse::<f64>()) {
                (Ok(member), Ok(demand)) if demand.is_finite() => {
                    Ok(MemberDemand { member, demand })
                }
                _ => Err(StoreError::BadReply(format!(
                    "demand entry {:.40}={:.40}",
                    m, d
                ))),
            },
            _ => Err(StoreError::BadReply("odd demand reply".into())),
        })
        .collect()
}

#[cfg(test)]
#[path = "demand_tests.rs"]
mod tests;
