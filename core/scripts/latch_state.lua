-- A countdown latch's state, for its waiters and its count: breaks it if a
-- registered party's lease ended (latch.lua). Safe to resend.
-- KEYS[1] latch hash, KEYS[2] parties zset (same hash tag).
-- ARGV[1] the count a latch that does not exist yet starts with.
-- Returns {count left, the reason it is broken or '', ms until the
-- earliest live party's lease ends (-1: no party)}.
-- @include latch.lua
local now = server_ms()
local left, broken = latch_open(KEYS, ARGV[1], now)
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local ms = -1
if #first > 0 then
  ms = math.max(0, tonumber(first[2]) - now)
end
return {left, broken or '', ms}
