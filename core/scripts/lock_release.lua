-- Delete the lock only if the caller's token still holds it, and wake one
-- waiter.
-- KEYS[1] lock key, KEYS[2] wake list. ARGV[1] owner token.
-- Returns 1 if deleted, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake_one(KEYS[2])
  return 1
end
return 0
