-- Where a waiting party of a barrier or double barrier stands (a lapsed
-- lease found now breaks the generation).
-- KEYS[1] hash, KEYS[2] parties zset. ARGV[1] party id, ARGV[2] its
-- generation, ARGV[3] '1' if its arrival must be in the zset (it waits
-- for the generation it arrived in), else '0'.
-- Returns {1, 0, ''} passed, {-1, 0, why} broken, {0, ms, ''} waiting (ms
-- to the earliest lease end of another party, -1: none).
-- @include barrier.lua
local bad = barrier_kinds(KEYS[1], KEYS[2])
if bad then return bad end
return barrier_outcome(KEYS[1], KEYS[2], tonumber(ARGV[2]), ARGV[1],
                       server_ms(), ARGV[3] == '1')
