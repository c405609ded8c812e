-- A writer stops waiting (its wait timed out or failed): drop its intent,
-- and wake whoever that intent was holding back.
-- KEYS[1] waiting writers zset, KEYS[2] writer hash, KEYS[3] readers zset,
-- KEYS[4] waiting readers zset, KEYS[5] admitted readers zset, KEYS[6]
-- readers' wake list, KEYS[7] writers' wake list. ARGV[1] owner.
-- Returns 1 if an intent was dropped, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
-- @include clock.lua
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local wake, count
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('ZCARD', KEYS[1]) == 0 then
    -- Readers queued behind us may go.
    wake, count = KEYS[6], redis.call('ZCARD', KEYS[4])
  elseif redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') == 0
      and redis.call('ZCARD', KEYS[5]) == 0 then
    -- Pass on a wake-up we may have taken.
    wake, count = KEYS[7], 1
  end
end
if wake then
  wake_n(wake, count)
end
return 1
