-- A barrier or double barrier: hash H {gen = generation, parties = n,
-- broken = why the current generation broke, bgen and bwhy = the last
-- generation that ended broken and why, t and ti = the arrival that
-- tripped the last generation and its index (a resent arrival reads
-- them), i:<party> = a waiting party's arrival index} and zset Z of the
-- current generation's parties scored with the server time (ms) each
-- lease ends (the watchdog pushes it: renew_party.lua). H's name is also
-- the channel every change is published on.
-- @include clock.lua
-- @include wrong_kind.lua
local LAPSED = "a party's lease ran out (it died, hung or was cut off)"

-- barrier_kinds(H, Z): nil, or the WRONGTYPE error for a key of the name
-- that holds another kind of value.
local function barrier_kinds(H, Z)
  local t = redis.call('TYPE', H).ok
  if t ~= 'hash' and t ~= 'none' then
    return wrong_kind(H, 'is not a barrier hash')
  end
  t = redis.call('TYPE', Z).ok
  if t ~= 'zset' and t ~= 'none' then
    return wrong_kind(Z, 'is not a zset of parties')
  end
  return nil
end

-- barrier_break(H, why): the current generation is broken (the first
-- reason stays); its waiters hear of it.
local function barrier_break(H, why)
  if redis.call('HSETNX', H, 'broken', why) == 1 then
    redis.pcall('PUBLISH', H, 'broken')
  end
end

-- barrier_lapsed(Z, now): whether a party's lease has ended.
local function barrier_lapsed(Z, now)
  return #redis.call('ZRANGEBYSCORE', Z, '-inf', now, 'LIMIT', 0, 1) > 0
end

-- barrier_fresh(H, fields): H rebuilt with gen, parties, bgen and bwhy
-- (arrival indexes and the broken mark dropped) and then fields.
local function barrier_fresh(H, fields)
  local s = redis.call('HMGET', H, 'parties', 'bgen', 'bwhy')
  redis.call('DEL', H)
  redis.call('HSET', H, 'parties', s[1])
  if s[2] then redis.call('HSET', H, 'bgen', s[2], 'bwhy', s[3]) end
  redis.call('HSET', H, unpack(fields))
end

-- barrier_outcome(H, Z, g, me, now, inside) for party me waiting in
-- generation g (inside: its arrival must be in Z): {1, 0, ''} it passed;
-- {-1, 0, why} it broke (a lapsed lease found now breaks it, and so does
-- the party's own arrival missing, lost with a server's data); {0, ms, ''}
-- still waiting, ms to the earliest lease end of another party (-1: none).
local function barrier_outcome(H, Z, g, me, now, inside)
  local s = redis.call('HMGET', H, 'gen', 'broken', 'bgen', 'bwhy')
  if not s[1] then
    return {-1, 0, 'the barrier was deleted'}
  end
  local gen = tonumber(s[1])
  if gen > g then
    if tonumber(s[3] or -1) == g then
      return {-1, 0, s[4]}
    end
    return {1, 0, ''}
  end
  if gen < g then
    return {-1, 0, 'the barrier was deleted'}
  end
  if s[2] then
    return {-1, 0, s[2]}
  end
  if barrier_lapsed(Z, now) then
    barrier_break(H, LAPSED)
    return {-1, 0, LAPSED}
  end
  if inside and not redis.call('ZSCORE', Z, me) then
    local why = "a party's arrival was lost (the server lost data)"
    barrier_break(H, why)
    return {-1, 0, why}
  end
  local first = redis.call('ZRANGE', Z, 0, 1, 'WITHSCORES')
  for i = 1, #first, 2 do
    if first[i] ~= me then
      return {0, math.max(0, tonumber(first[i + 1]) - now), ''}
    end
  end
  return {0, -1, ''}
end
