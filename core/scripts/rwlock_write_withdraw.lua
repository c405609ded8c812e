-- A writer stops waiting (its wait timed out or failed): drop its intent,
-- and wake whoever that intent was holding back.
-- KEYS[1] waiting writers zset, KEYS[2] writer hash, KEYS[3] readers zset,
-- KEYS[4] readers' wake list, KEYS[5] writers' wake list. ARGV[1] owner.
-- Returns 1 if an intent was dropped, else 0.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local wake
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('ZCARD', KEYS[1]) == 0 then
    wake = KEYS[4] -- readers queued behind us may go
  elseif redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') == 0 then
    wake = KEYS[5] -- pass on a wake-up we may have taken
  end
end
if wake then
  if redis.call('LLEN', wake) == 0 then
    redis.call('RPUSH', wake, '1')
  end
  redis.call('PEXPIRE', wake, 5000)
end
return 1
