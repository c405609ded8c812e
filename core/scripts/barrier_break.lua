-- A party gives up (its wait timed out or failed) or the barrier is
-- aborted: the generation breaks, unless the party's generation already
-- passed (then it has passed: its wait succeeds).
-- KEYS[1] hash, KEYS[2] parties zset. ARGV[1] party id, ARGV[2] its
-- generation (-1: the current one, an abort; -2: the current one if the
-- party's arrival is in it, for an arrival whose reply was lost), ARGV[3]
-- why.
-- Returns barrier_check.lua's {1, 0, ''} or {-1, 0, why}.
-- @include barrier.lua
local H, Z, g = KEYS[1], KEYS[2], tonumber(ARGV[2])
local bad = barrier_kinds(H, Z)
if bad then return bad end
local gen = redis.call('HGET', H, 'gen')
if not gen then
  return {-1, 0, 'the barrier was deleted'}
end
if g == -2 and not redis.call('ZSCORE', Z, ARGV[1]) then
  return {-1, 0, ARGV[3]} -- it did not arrive (or its generation ended)
end
if g < 0 then
  g = tonumber(gen)
end
local o = barrier_outcome(H, Z, g, ARGV[1], server_ms())
if o[1] ~= 0 then
  return o
end
barrier_break(H, ARGV[3])
return {-1, 0, ARGV[3]}
