-- Leave the write side of a Redisson RReadWriteLock entirely (the owner's
-- client is closing): as the last write release, at once.
-- KEYS[1] the lock hash, KEYS[2] its channel. ARGV[1] owner:write.
-- Returns 1 if the owner held it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
if redis.call('HGET', KEYS[1], 'mode') ~= 'write' or
    redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redisson_write_gone(KEYS[1], KEYS[2])
return 1
