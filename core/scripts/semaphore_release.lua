-- Give a permit back, only if it is still live, and wake one waiter.
-- KEYS[1] permits zset, KEYS[2] limit, KEYS[3] permit wake list.
-- ARGV[1] permit id, ARGV[2] the caller's permit count (the limit if none
-- is stored).
-- Returns 1 if the permit was freed, 0 if it was unknown or had expired
-- (nothing of anyone else's changes).
-- A damaged limit never keeps a permit from being returned; it only
-- suppresses the wake-up.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include sem_wake.lua
-- @include clock.lua
local raw = redis.pcall('GET', KEYS[2])
if type(raw) ~= 'string' then raw = ARGV[2] end
local limit = tonumber(raw) or 0
local now = server_ms()
local freed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 then
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] then
    redis.call('PEXPIRE', KEYS[1],
               string.format('%d', math.max(1, tonumber(top[2]) - now)))
  end
end


sem_wake(KEYS[3], freed + removed, limit - redis.call('ZCARD', KEYS[1]))
return removed
