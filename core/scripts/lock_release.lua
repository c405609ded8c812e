-- Delete the lock only if the caller's token still holds it, and wake one
-- waiter.
-- KEYS[1] lock key, KEYS[2] wake list, KEYS[3] lock-delay marker (optional:
-- a release frees the name at once). ARGV[1] owner token.
-- Returns 1 if deleted, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[3] then
    redis.call('DEL', KEYS[3])
  end
  wake_one(KEYS[2])
  return 1
end
return 0
