-- Leave a reentrant lock in Redisson's layout once; the last leave deletes
-- it and publishes Redisson's unlock message, which wakes waiters of both
-- Redisson and hilock.
-- KEYS[1] the lock hash, KEYS[2] its channel (redisson_lock__channel:...).
-- ARGV[1] owner, ARGV[2] lease in ms.
-- Returns the remaining hold count (0: released), or -1 if not held by
-- this owner (nothing changed).
-- @once: a resend would count twice, so a broken connection is reported.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return n
end
redis.call('DEL', KEYS[1])
redisson_unlocked(KEYS[2], '0')
return 0
