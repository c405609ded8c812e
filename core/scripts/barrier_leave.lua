-- A party leaves a double barrier it entered (generation g, odd: its
-- parties inside); the last one out ends the round (the next, g + 1,
-- takes entries) and tells the others. A party that leaves before the
-- round began (its enter gave up) withdraws.
-- KEYS[1] hash, KEYS[2] parties zset (a party that left is scored -1
-- until the round ends). ARGV[1] party id, ARGV[2] g.
-- Returns {1, 0, ''} all left, {-1, 0, why} broken, {0, ms, ''} others
-- are inside (as barrier_check.lua), {2, 0, ''} withdrawn.
-- @include barrier.lua
local H, Z, me, g = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local bad = barrier_kinds(H, Z)
if bad then return bad end
local now = server_ms()
local gen = tonumber(redis.call('HGET', H, 'gen') or -1)
if gen % 2 == 0 and gen == g then
  -- Entering (not all in yet): the entry is withdrawn.
  redis.call('ZREM', Z, me)
  redis.call('HDEL', H, 'i:' .. me)
  return {2, 0, ''}
end
if gen ~= g or redis.call('HEXISTS', H, 'broken') == 1 then
  return barrier_outcome(H, Z, g, me, now)
end
-- Out (scored -1: its lease ends here), waiting for the others to leave.
redis.call('ZADD', Z, 'XX', -1, me)
if redis.call('ZCOUNT', Z, 0, '+inf') == 0 then
  barrier_end(H, Z, gen, me, 0)
  redis.call('DEL', Z)
  redis.pcall('PUBLISH', H, 'left')
  return {1, 0, ''}
end
return barrier_outcome(H, Z, g, me, now)
