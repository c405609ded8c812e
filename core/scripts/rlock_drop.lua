-- Leave a reentrant lock entirely, every re-entry of the owner at once (its
-- client is closing): the lock is deleted and one waiter woken.
-- KEYS[1] owners hash, KEYS[2] wake list, KEYS[3] lock-delay marker
-- (optional: deleted, as by a release). ARGV[1] owner.
-- Returns 1 if the owner held it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- One owner at a time: with its last call's nonce the hash is gone now.
redis.call('HDEL', KEYS[1], ARGV[1] .. ':op')
if KEYS[3] then
  redis.call('DEL', KEYS[3])
end
wake_one(KEYS[2])
return 1
