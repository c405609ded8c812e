-- Read-only view of a read-write lock for one owner.
-- KEYS[1] readers zset, KEYS[2] read hold counts, KEYS[3] writer hash.
-- ARGV[1] owner.
-- Returns {live readers, owner's read count, writer held (0/1), owner's
-- write count}.
-- @include clock.lua
local now = server_ms()
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local mine = 0
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > now then
  mine = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
end
local w = redis.call('EXISTS', KEYS[3])
local wmine = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
return {live, mine, w, wmine}
