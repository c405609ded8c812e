-- A barrier or double barrier: hash H {gen = generation, parties = n,
-- broken = why the current generation broke, bgen and bwhy = the last
-- generation that ended broken and why, t and ti = the party that ended
-- the last generation and its index (a resend reads them), i:<party> = a
-- waiting party's arrival index, p:<party> = g: that waiting party's
-- generation g passed (read once by the party)} and zset Z of the current
-- generation's parties scored with the server time (ms) each lease ends
-- (the watchdog pushes it: renew_party.lua; a double barrier's party that
-- has left and waits for the others is scored -1). H's name is also the
-- channel every change is published on.
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
  if redis.call('HEXISTS', H, 'broken') == 0 then
    redis.call('HSET', H, 'broken', why)
    redis.pcall('PUBLISH', H, 'broken')
  end
end

-- barrier_lapsed(Z, now): whether a party's lease has ended.
local function barrier_lapsed(Z, now)
  return #redis.call('ZRANGEBYSCORE', Z, 0, now, 'LIMIT', 0, 1) > 0
end

-- barrier_end(H, Z, g, me, idx): generation g ends well, by party me
-- (its index idx): every other party still in Z is told it passed (p:),
-- and the next generation begins.
local function barrier_end(H, Z, g, me, idx)
  local all = redis.call('ZRANGE', Z, 0, -1)
  for _, m in ipairs(all) do
    if m ~= me then
      redis.call('HSET', H, 'p:' .. m, g)
    end
    redis.call('HDEL', H, 'i:' .. m)
  end
  redis.call('HSET', H, 'gen', g + 1, 't', me, 'ti', idx)
end

-- barrier_outcome(H, Z, g, me, now, inside) for party me waiting in
-- generation g (inside: its arrival must be in Z): {1, 0, ''} it passed;
-- {-1, 0, why} it broke (a lapsed lease found now breaks it, and so does
-- the party's own arrival missing, lost with a server's data); {0, ms, ''}
-- still waiting, ms to the earliest lease end of another party (-1: none).
local function barrier_outcome(H, Z, g, me, now, inside)
  local s = redis.call('HMGET', H, 'gen', 'broken', 'bgen', 'bwhy', 't',
                       'p:' .. me)
  if not s[1] then
    return {-1, 0, 'the barrier was deleted'}
  end
  local gen = tonumber(s[1])
  if gen > g then
    -- Passed only if told so (or it ended the generation itself and this
    -- is a resend): a generation that was reset, or one this party cannot
    -- account for, is broken, never passed.
    if s[6] and tonumber(s[6]) == g then
      redis.call('HDEL', H, 'p:' .. me)
      return {1, 0, ''}
    end
    if s[5] == me and gen == g + 1 then
      return {1, 0, ''}
    end
    if tonumber(s[3] or -1) == g then
      return {-1, 0, s[4]}
    end
    return {-1, 0, 'the barrier was reset'}
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
  local first = redis.call('ZRANGEBYSCORE', Z, 0, '+inf', 'WITHSCORES',
                           'LIMIT', 0, 2)
  for i = 1, #first, 2 do
    if first[i] ~= me then
      return {0, math.max(0, tonumber(first[i + 1]) - now), ''}
    end
  end
  return {0, -1, ''}
end
