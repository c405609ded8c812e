-- Leave a Redisson RFairLock entirely, every re-entry at once (the owner's
-- client is closing), and tell the first waiter.
-- KEYS[1] the lock hash, KEYS[2] the channel prefix. ARGV[1] owner.
-- Returns 1 if the owner held it, 0 if not (nothing changed).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include clock.lua
-- @include redisson.lua
local queue = redisson_queue(KEYS[1], server_ms())
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redisson_next(queue, KEYS[2])
return 1
