-- A barrier's state in one read.
-- KEYS[1] hash, KEYS[2] parties zset.
-- Returns {broken (1 or 0), parties waiting (or inside: a double
-- barrier's parties that left are scored -1), generation}.
-- @include barrier.lua
local bad = barrier_kinds(KEYS[1], KEYS[2])
if bad then return bad end
local s = redis.call('HMGET', KEYS[1], 'gen', 'broken')
return {s[2] and 1 or 0, redis.call('ZCOUNT', KEYS[2], 0, '+inf'), tonumber(s[1] or 0)}
