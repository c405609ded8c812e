-- Leave a reentrant lock entirely, every re-entry of the owner at once (its
-- client is closing): the lock is deleted and one waiter woken.
-- KEYS[1] owners hash, KEYS[2] wake list. ARGV[1] owner.
-- Returns 1 if the owner held it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- One owner at a time: the hash is gone now.
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('RPUSH', KEYS[2], '1')
end
redis.call('PEXPIRE', KEYS[2], 5000)
ring(KEYS[2])
return 1
