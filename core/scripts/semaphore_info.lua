-- Read a semaphore's state; writes nothing.
-- KEYS[1] permits zset, KEYS[2] limit.
-- ARGV[1] the caller's permit count (reported if no limit is stored),
-- ARGV[2] a permit id to look up, or ''.
-- Returns {limit, live permits, 1 if the limit is stored else 0,
-- ms left on that permit (-1: not live)}.
-- @include clock.lua
-- @include sem_limit.lua
local limit, raw = sem_limit(KEYS[2], ARGV[1])
if not limit then return raw end
local now = server_ms()
local live = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now),
                        '+inf')
local left = -1
if ARGV[2] ~= '' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if s and tonumber(s) > now then
    left = tonumber(s) - now
  end
end
return {limit, live, raw and 1 or 0, left}
