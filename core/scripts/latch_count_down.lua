-- Count a countdown latch down by one (never below 0), by anyone (ARGV[2]
-- = '') or by a registered party (ARGV[2] its id), which leaves the
-- parties in the same step (its lease no longer matters). At 0 the waiters
-- are told (a message on the channel named as the hash).
-- KEYS[1] latch hash, KEYS[2] parties zset (same hash tag).
-- ARGV[1] the count a latch that does not exist yet starts with, ARGV[2]
-- the party's id or ''.
-- Returns {1, count left}; {0, count left} when ARGV[2] is no registered
-- party (it counted down already, or was never one); {-1, reason} when the
-- latch is broken.
-- @once: a resend would count down twice.
-- @include latch.lua
local now = server_ms()
local left, broken = latch_open(KEYS, ARGV[1], now)
if broken then
  return {-1, broken}
end
if ARGV[2] ~= '' and redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then
  return {0, left}
end
if left > 0 then
  left = left - 1
  redis.call('HSET', KEYS[1], 'count', string.format('%d', left))
  if left == 0 then
    redis.pcall('PUBLISH', KEYS[1], 'zero')
  end
end
return {1, left}
