-- A reader stops waiting (its wait timed out or failed): drop it from the
-- waiting and admitted readers, and wake the writer if it was the last
-- admitted reader the writer was waiting for.
-- KEYS[1] waiting readers zset, KEYS[2] admitted readers zset, KEYS[3]
-- readers zset, KEYS[4] writer hash, KEYS[5] waiting writers zset, KEYS[6]
-- the writers' wake list. ARGV[1] owner.
-- Returns 1 if it was waiting or admitted, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
-- @include clock.lua
local waiting = redis.call('ZREM', KEYS[1], ARGV[1])
local admitted = redis.call('ZREM', KEYS[2], ARGV[1])
if waiting + admitted == 0 then
  return 0
end
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if admitted == 1 and redis.call('ZCARD', KEYS[2]) == 0
    and redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') == 0
    and redis.call('EXISTS', KEYS[4]) == 0
    and redis.call('ZCARD', KEYS[5]) > 0 then
  wake_one(KEYS[6])
end
return 1
