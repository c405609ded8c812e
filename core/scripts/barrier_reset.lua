-- Reset a barrier or double barrier (ARGV[1] 'b' or 'd'): the current
-- generation ends broken for its waiters, and the next one (a double
-- barrier's next round) starts empty and unbroken.
-- KEYS[1] hash, KEYS[2] parties zset.
-- Returns the new generation (-1: no barrier of the name yet).
-- @include barrier.lua
local H, Z = KEYS[1], KEYS[2]
local bad = barrier_kinds(H, Z)
if bad then return bad end
local s = redis.call('HMGET', H, 'gen', 'broken')
if not s[1] then
  return -1
end
local gen = tonumber(s[1])
local nxt = gen + 1
if ARGV[1] == 'd' and nxt % 2 == 1 then
  nxt = nxt + 1
end
for _, m in ipairs(redis.call('ZRANGE', Z, 0, -1)) do
  redis.call('HDEL', H, 'i:' .. m)
end
redis.call('DEL', Z)
redis.call('HDEL', H, 'broken', 't', 'ti')
redis.call('HSET', H, 'gen', nxt, 'bgen', gen, 'bwhy',
           s[2] or 'the barrier was reset')
redis.pcall('PUBLISH', H, 'reset')
return nxt
