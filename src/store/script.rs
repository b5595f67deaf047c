//! The one Lua script every Redis call runs, and how increments become its
//! arguments and its answer becomes tallies.
//!
//! Each increment is eight arguments (`kind`, plus 4 for a refund, `hits`,
//! `ttl`, two that depend on the kind, a concurrency slot's id or empty, and
//! the seconds its usage is kept and the window it counts) and one key, or
//! two: a sliding window's previous window, or a concurrency counter's usage
//! key (a hash of one field, the current window's start, holding the most
//! slots held at once in it; in the counter's hash slot). Each answers three
//! integers, the third being the usage the advisor reads (0 for a window,
//! whose count is its usage; -1 when the script could not say):
//! - fixed window: the count after `INCRBY`, and 0;
//! - sliding window: this window's count after `INCRBY`, and the previous
//!   window's count;
//! - token bucket: 1 if the hits were taken (else 0), how far the bucket
//!   is from full in microseconds, and the tokens its key took in the
//!   window so far (-1 for a refused request), or asked for, taken or not,
//!   when its kind carries 8 (a rule in shadow mode). When it carries 16
//!   (`overdraft: true`) hits that do not fit are refused and taken all
//!   the same, the arrival time going past the tolerance (debt). The key holds `<arrival time>:<window
//!   start>:<tokens asked>`, so the usage costs no call of its own. The
//!   time is Redis's own (`TIME`), so the clocks of the sluice instances
//!   sharing a bucket do not matter.
//! - concurrency: the slots held after taking one (a sorted set of slot ids
//!   scored by when their lease ends, on Redis's clock), or one past the
//!   limit when none was free; 0; and for a take, the most the key held at
//!   once earlier in the window (-1 for a release or a look). Ended leases
//!   are dropped first.
//!
//! A refund (`is_negative_hits`) answers the same three integers after giving
//! the hits back: `DECRBY` floored at 0 on a counter that exists (a missing
//! one stays missing), or a bucket's arrival time moved back, never past now.
//!
//! Writes run under `pcall`: a counter that would overflow answers `-1`, a key
//! holding something else `-2`, and those are the request's own errors. Any
//! other error (out of memory, read-only replica, no permission) fails the
//! call and is the store's.

use super::{Increment, StoreError};
use crate::limiter::{Algorithm, Now, Tally};

pub(super) const SCRIPT: &str = r"
local out = {}
local k = 1
local now = nil
-- A concurrency counter's usage key is a hash of one field, the current
-- window's start, holding the most slots held at once in it; a new window's
-- first figure drops the old one and sets the key to expire with the
-- window. -1: the key holds something else.
local function fresh(key, start, ttl)
  if redis.call('HLEN', key) > 1 then
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if f ~= start then redis.call('HDEL', key, f) end
    end
  end
  redis.call('EXPIRE', key, ttl)
end
local function peak(key, start, held, ttl)
  local p = redis.pcall('HGET', key, start)
  if type(p) == 'table' then return -1 end
  local known = p
  p = tonumber(p) or 0
  if held > p then
    redis.call('HSET', key, start, held)
    if not known then fresh(key, start, ttl) end
  end
  return p
end
local function refused(e)
  e = e or ''
  if string.find(e, 'overflow', 1, true) then return -1 end
  if string.find(e, 'WRONGTYPE', 1, true) or string.find(e, 'not an integer', 1, true) then return -2 end
  return nil
end
for i = 0, #ARGV / 8 - 1 do
  local kind, hits, ttl = tonumber(ARGV[8*i+1]), ARGV[8*i+2], ARGV[8*i+3]
  local overdraft = kind >= 16
  if overdraft then kind = kind - 16 end
  local demand = kind >= 8
  if demand then kind = kind - 8 end
  local refund = kind >= 4
  if refund then kind = kind - 4 end
  local key = KEYS[k]
  k = k + 1
  local a, b, c = 0, 0, 0
  local uttl, ustart = tonumber(ARGV[8*i+7]), ARGV[8*i+8]
  if kind == 3 then
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    local limit, lease, slot = tonumber(ARGV[8*i+4]), tonumber(ARGV[8*i+5]), ARGV[8*i+6]
    local swept = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now)
    if type(swept) == 'table' then
      local r = refused(swept.err)
      if r == nil then return swept end
      a = r
    elseif refund then
      redis.call('ZREM', key, slot)
      a = redis.call('ZCARD', key)
    else
      local held = redis.call('ZCARD', key)
      a = held
      if redis.call('ZSCORE', key, slot) then
        if tonumber(hits) > 0 then redis.call('ZADD', key, now + lease, slot) end
      elseif tonumber(hits) > 0 then
        a = held + 1
        if held < limit then redis.call('ZADD', key, now + lease, slot) end
      end
      if tonumber(hits) > 0 then
        redis.call('PEXPIRE', key, math.ceil(lease / 1000) + ttl * 1000)
      end
    end
    c = -1
    if not refund and tonumber(hits) > 0 and a >= 0 then c = peak(KEYS[k], ustart, a, uttl) end
    k = k + 1
  elseif kind == 2 then
    if now == nil then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    local interval, tolerance = tonumber(ARGV[8*i+4]), tonumber(ARGV[8*i+5])
    local h = tonumber(hits)
    -- '<arrival time>:<window start>:<tokens taken in it (asked, on demand)>'
    local got = redis.pcall('GET', key)
    local tat, n = 0, 0
    if type(got) == 'table' then
      local r = refused(got.err)
      if r == nil then return got end
      a = r
    elseif got then
      local t, s, u = string.match(got, '^(%d+):(%d+):(%d+)$')
      tat = tonumber(t)
      if tat == nil then a = -2 elseif s == ustart then n = tonumber(u) end
    end
    local write = nil
    if a == 0 and refund then
      a, b, c = 1, 0, math.max(n - h, 0)
      local back = tat
      if tat > now then back = math.max(tat - h * interval, now) end
      b = math.max(back - now, 0)
      if got and (back ~= tat or c ~= n) then write = back end
    elseif a == 0 then
      local base = math.max(tat, now)
      local after = math.min(base + h * interval, 9007199254740992)
      c = math.min(n + h, 9007199254740992)
      if after - now > tolerance and overdraft and h > 0 then
        -- Refused, and taken all the same: the debt is paid by refill.
        a, b, write = 0, after - now, after
      elseif after - now > tolerance then
        a, b = 0, base - now
        -- Refused: counted only where the usage is the whole demand.
        if not demand then c = -1 elseif h > 0 then write = tat end
      else
        a, b, write = 1, after - now, after
      end
    else
      c = -1
    end
    if write then
      -- Kept while the bucket refills and while its window's usage counts.
      local px = math.max(math.ceil((write - now) / 1000), 0) + ttl * 1000
      px = math.max(px, uttl * 1000)
      -- %d: whole numbers under 2^53, half the cost of %.0f in Redis's Lua.
      redis.call('SET', key, string.format('%d:%s:%d', write, ustart, c), 'PX', px)
    end
  else
    local n = 0
    if not refund then
      n = redis.pcall('INCRBY', key, hits)
    elseif redis.call('EXISTS', key) == 1 then
      n = redis.pcall('DECRBY', key, hits)
      if type(n) ~= 'table' and n < 0 then
        redis.call('SET', key, 0, 'KEEPTTL')
        n = 0
      end
    end
    if type(n) == 'table' then
      local r = refused(n.err)
      if r == nil then return n end
      a = r
    else
      a = n
      if not refund then redis.call('EXPIRE', key, ttl) end
    end
    if kind == 1 then
      local prev = KEYS[k]
      k = k + 1
      local p = redis.pcall('GET', prev)
      if type(p) == 'table' then
        local r = refused(p.err)
        if r == nil then return p end
        a = r
      elseif p then
        b = tonumber(p) or 0
      end
    end
  end
  out[3*i+1] = a
  out[3*i+2] = b
  out[3*i+3] = c
end
return out
";

/// The script's first answer for a counter past `i64::MAX`: over any limit.
const OVERFLOW: i64 = -1;
/// The script's first answer for a key that holds something else.
const NOT_A_COUNTER: i64 = -2;

/// One increment as the script takes it.
pub(super) struct Op {
    /// One key, or two for a sliding window (this window's, then the
    /// previous one's).
    pub keys: Vec<String>,
    /// The numeric arguments: five before the slot, then the usage key's
    /// seconds and the window it counts.
    pub args: [u64; 7],
    /// A concurrency slot's id, the sixth argument (empty otherwise).
    pub slot: Option<Box<str>>,
}

/// The script's answers per increment.
pub(super) const ANSWERS: usize = 3;

/// Added to the shape's tag for a refund.
const REFUND: u64 = 4;
/// Added to a token bucket's tag when its usage counts refused hits too.
const DEMAND: u64 = 8;
/// Added to a token bucket's tag when it takes hits that do not fit, into
/// debt (`overdraft: true`).
const OVERDRAFT: u64 = 16;

/// Seconds a key may outlive its window. Expiries are relative to sluice's own
/// clock, so a skew between sluice and Redis cannot end a window early.
pub const EXPIRY_SLACK_SECONDS: u64 = 5;

impl Op {
    /// The script's arguments for `inc` with its `keys`, at `now`.
    pub(super) fn new(inc: &Increment, keys: Vec<String>, now: Now) -> Op {
        let slack = EXPIRY_SLACK_SECONDS;
        let until_end = inc.window.seconds_until_reset(now);
        let (p1, p2, ttl) = match inc.algorithm {
            Algorithm::FixedWindow => (0, 0, until_end + slack),
            // This window's count is read through the whole next window.
            Algorithm::SlidingWindow => (0, 0, until_end + inc.window.period.seconds() + slack),
            Algorithm::TokenBucket { refill: r, .. } => (r.interval_us, r.tolerance_us, slack),
            Algorithm::Concurrency => (
                u64::from(inc.limit),
                inc.window.period.seconds().saturating_mul(1_000_000),
                slack,
            ),
        };
        let demand = inc.usage_counts_refused && inc.algorithm.refill().is_some();
        Op {
            keys,
            slot: inc.slot.clone(),
            args: [
                u64::from(inc.algorithm.tag())
                    + if inc.refund { REFUND } else { 0 }
                    + if demand { DEMAND } else { 0 }
                    + if inc.algorithm.refill().is_some_and(|r| r.overdraft) {
                        OVERDRAFT
                    } else {
                        0
                    },
                inc.hits,
                ttl,
                p1,
                p2,
                until_end + slack,
                inc.window.start.0,
            ],
        }
    }

    /// The shape's tag, whether the op counts or refunds.
    pub(super) fn kind(&self) -> u8 {
        u8::try_from(self.args[0] % REFUND).unwrap_or(0)
    }

    /// Adds this increment's keys and arguments to an invocation.
    pub(super) fn add_to(&self, inv: &mut redis::ScriptInvocation<'_>) {
        for key in &self.keys {
            inv.key(key);
        }
        add_args(inv, &self.args, self.slot.as_deref().unwrap_or_default());
    }
}

/// Arguments in the script's order: five numbers, the slot, the usage
/// key's seconds and window.
pub(super) fn add_args(inv: &mut redis::ScriptInvocation<'_>, args: &[u64; 7], slot: &str) {
    let [kind, hits, ttl, p1, p2, usage_ttl, usage_window] = *args;
    for a in [kind, hits, ttl, p1, p2] {
        inv.arg(a);
    }
    inv.arg(slot);
    inv.arg(usage_ttl);
    inv.arg(usage_window);
}

/// Tallies from the script's raw answers ([`ANSWERS`] per increment) for
/// increments of `kinds`; a reply of the wrong length is the store's fault.
pub(super) fn decode(
    kinds: impl ExactSizeIterator<Item = u8>,
    raw: &[i64],
) -> Result<Vec<Tally>, StoreError> {
    super::same_length(raw.len(), kinds.len() * ANSWERS)?;
    kinds
        .zip(raw.chunks_exact(ANSWERS))
        .map(|(kind, answer)| {
            let (a, b, c) = match answer {
                [a, b, c] => (*a, *b, *c),
                _ => (0, 0, -1),
            };
            // The usage figure, when the script could say.
            let usage = u64::try_from(c).ok();
            let count = |n: i64| match n {
                OVERFLOW => Ok(u64::MAX),
                NOT_A_COUNTER => Err(StoreError::Rejected(
                    "a counter key holds a value that is not a count".into(),
                )),
                n => u64::try_from(n)
                    .map_err(|_| StoreError::BadReply(format!("negative count {n}"))),
            };
            Ok(match kind {
                1 => Tally::Sliding {
                    current: count(a)?,
                    previous: count(b)?,
                },
                2 => Tally::Bucket {
                    taken: count(a)? == 1,
                    debt_us: count(b)?,
                    asked: usage,
                },
                3 => Tally::Slots {
                    held: count(a)?,
                    peak: usage,
                },
                _ => Tally::Count(count(a)?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_by_kind_and_refused_counters_are_errors() {
        let t = decode(
            [0, 1, 2, 3, 3].into_iter(),
            &[3, 0, 0, 4, 9, 0, 1, 250, 7, 2, 0, 1, 2, 0, -1],
        )
        .unwrap();
        assert_eq!(
            t,
            [
                Tally::Count(3),
                Tally::Sliding {
                    current: 4,
                    previous: 9
                },
                Tally::Bucket {
                    taken: true,
                    debt_us: 250,
                    asked: Some(7)
                },
                Tally::Slots {
                    held: 2,
                    peak: Some(1)
                },
                Tally::Slots {
                    held: 2,
                    peak: None
                }
            ]
        );
        assert_eq!(
            decode([0].into_iter(), &[-1, 0, 0]).unwrap(),
            [Tally::Count(u64::MAX)]
        );
        assert!(matches!(
            decode([0].into_iter(), &[-2, 0, 0]),
            Err(StoreError::Rejected(_))
        ));
        assert!(matches!(
            decode([0, 0].into_iter(), &[1, 0, 0]),
            Err(StoreError::BadReply(_))
        ));
        assert!(matches!(
            decode([0].into_iter(), &[-7, 0, 0]),
            Err(StoreError::BadReply(_))
        ));
    }
}
