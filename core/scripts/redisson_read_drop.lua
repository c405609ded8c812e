-- Leave the read side of a Redisson RReadWriteLock entirely, every hold of
-- the owner at once (its client is closing); with no holder left the hash
-- goes and Redisson's unlock message 0 is published.
-- KEYS[1] the lock hash, KEYS[2] its channel. ARGV[1] owner.
-- Returns 1 if the owner read it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not n then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
for i = 1, n do
  redis.call('DEL', redisson_hold_key(KEYS[1], ARGV[1], i))
end
if redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
  redisson_unlocked(KEYS[2], '0')
end
return 1
