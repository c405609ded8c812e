-- Give up the lead, only if the caller's token holds it: wake one standby
-- and tell the observers.
-- KEYS[1] leadership hash, KEYS[2] the standbys' wake list. ARGV[1] owner
-- token.
-- Returns 1 if resigned, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
wake_one(KEYS[2])
redis.pcall('PUBLISH', KEYS[1], 'resign')
return 1
