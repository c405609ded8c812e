-- Delete the lock only if the caller's token still holds it, and wake one
-- waiter.
-- KEYS[1] lock key, KEYS[2] wake list. ARGV[1] owner token.
-- Returns 1 if deleted, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- One element wakes one BLPOP waiter; an element nobody takes costs the
  -- next waiter one early retry, and lapses after 5 s.
  if redis.call('LLEN', KEYS[2]) == 0 then
    redis.call('RPUSH', KEYS[2], '1')
  end
  redis.call('PEXPIRE', KEYS[2], 5000)
  ring(KEYS[2])
  return 1
end
return 0
