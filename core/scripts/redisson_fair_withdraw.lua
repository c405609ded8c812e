-- A waiter of a Redisson RFairLock gives up (its wait ran out): it leaves
-- the queue, the deadlines of those behind it move up by its budget (as
-- Redisson's acquireFailed does), and a new first waiter of a free lock is
-- told.
-- KEYS[1] the lock hash, KEYS[2] the channel prefix. ARGV[1] owner,
-- ARGV[2] its budget in ms.
-- Returns 1 if it was queued, 0 if not.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include clock.lua
-- @include redisson.lua
local queue, zset = redisson_queue(KEYS[1], server_ms())
local behind, found = {}, false
for _, waiter in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  if found then
    behind[#behind + 1] = waiter
  elseif waiter == ARGV[1] then
    found = true
  end
end
if not found then
  redis.call('ZREM', zset, ARGV[1])
  return 0
end
for _, waiter in ipairs(behind) do
  redis.call('ZINCRBY', zset, -tonumber(ARGV[2]), waiter)
end
redis.call('LREM', queue, 0, ARGV[1])
redis.call('ZREM', zset, ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redisson_next(queue, KEYS[2])
end
return 1
