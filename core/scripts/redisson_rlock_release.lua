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
local n = redisson_leave(KEYS[1], ARGV[1], ARGV[2])
if n ~= 0 then
  return n
end
redis.call('DEL', KEYS[1])
redisson_unlocked(KEYS[2], '0')
return 0
