-- Leave a reentrant lock in Redisson's layout entirely, every re-entry of
-- the owner at once (its client is closing), and publish Redisson's unlock
-- message.
-- KEYS[1] the lock hash, KEYS[2] its channel. ARGV[1] owner.
-- Returns 1 if the owner held it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- One owner at a time: the hash is empty, so Redis has removed it.
redisson_unlocked(KEYS[2], '0')
return 1
