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
if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then
  return -1
end
local n = redisson_leave(KEYS[1], ARGV[1], ARGV[2])
if n ~= 0 then
  return n
end
redisson_write_gone(KEYS[1], KEYS[2])
return 0
