-- Read a semaphore's state; writes nothing.
-- KEYS[1] permits zset, KEYS[2] limit.
-- ARGV[1] the caller's permit count (reported if no limit is stored),
-- ARGV[2] a permit id to look up, or ''.
-- Returns {limit, live permits, 1 if the limit is stored else 0,
-- ms left on that permit (-1: not live)}.
local raw = redis.call('GET', KEYS[2])
local limit = tonumber(ARGV[1])
if raw then
  limit = tonumber(raw)
  if limit == nil or limit < 0 or limit % 1 ~= 0 then
    return redis.error_reply('ERR hilock semaphore script: ' .. KEYS[2] ..
                             ' holds no permit count')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
