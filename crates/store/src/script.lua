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
  local take = kind >= 32
  if take then kind = kind - 32 end
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
    -- A window the store's clock does not agree with (the instance's
    -- clock put the request across a boundary from it) is not counted:
    -- answered with the store's window, to be counted there.
    local period = tonumber(ARGV[8*i+4])
    local moved = false
    if period > 0 and not refund then
      if now == nil then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      local secs = math.floor(now / 1000000)
      local start = secs - secs % period
      if start ~= tonumber(ustart) then
        moved = true
        a, b = -3, start
        if kind == 1 then k = k + 1 end
      end
    end
    -- A take of a chunk run after its caller gave it up (when, on this
    -- clock, is its second number) counts the request's own hits only.
    local late = false
    if take and not moved then
      if now == nil then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      if now > tonumber(ARGV[8*i+5]) then
        hits = ARGV[8*i+6]
        late = true
      end
    end
    local n = 0
    if moved then
    elseif not refund then
      n = redis.pcall('INCRBY', key, hits)
    elseif redis.call('EXISTS', key) == 1 then
      n = redis.pcall('DECRBY', key, hits)
      if type(n) ~= 'table' and n < 0 then
        redis.call('SET', key, 0, 'KEEPTTL')
        n = 0
      end
    end
    if moved then
    elseif type(n) == 'table' then
      local r = refused(n.err)
      if r == nil then return n end
      a = r
    else
      a = n
      if not refund then redis.call('EXPIRE', key, ttl) end
      if late then b = -4 end
    end
    if kind == 1 and not moved then
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
