-- Operator release: delete the lock whoever holds it, and wake one waiter.
-- KEYS[1] lock key, KEYS[2] wake list, KEYS[3] lock-delay marker (deleted
-- too: the operator frees the name at once). Returns 1 if a lock was
-- deleted.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
redis.call('DEL', KEYS[3])
if redis.call('DEL', KEYS[1]) == 1 then
  wake_one(KEYS[2])
  return 1
end
return 0
