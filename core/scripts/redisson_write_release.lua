-- Leave the write side of a Redisson RReadWriteLock once. The last leave
-- frees the lock (or, if the writer also reads, leaves it read-held: a
-- downgrade) and publishes Redisson's unlock message 1 (wake all).
-- KEYS[1] the lock hash, KEYS[2] its channel (redisson_rwlock:...).
-- ARGV[1] the writer's field (owner:write), ARGV[2] lease in ms.
-- Returns the remaining write count (0: released), or -1 if not held by
-- this owner (nothing changed).
-- @once: a resend would count twice, so a broken connection is reported.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
if redis.call('HGET', KEYS[1], 'mode') ~= 'write' or
    redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return n
end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
redisson_unlocked(KEYS[2], '1')
return 0
