-- A party arrives at a barrier (ARGV[4] 'b') or enters a double barrier
-- ('e'): its lease ends ttl from now (renewed while it waits); the arrival
-- that makes parties trips the generation (a barrier's arrivals are
-- cleared; a double barrier's stay inside until they leave).
-- KEYS[1] hash (and channel), KEYS[2] parties zset (same hash tag)
-- ARGV[1] party id, ARGV[2] ttl in ms, ARGV[3] parties, ARGV[4] mode
-- Returns {code, gen, n, why}: 1 tripped (n = the arrival index), 0
-- waiting in generation gen (n = its index), -1 broken (why), -3 a double
-- barrier's parties are inside (wait for gen to move), -4 the barrier was
-- made with n parties.
-- @include barrier.lua
local H, Z, me, P = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3])
local bad = barrier_kinds(H, Z)
if bad then return bad end
local now = server_ms()
local s = redis.call('HMGET', H, 'gen', 'parties', 'broken', 't', 'ti',
                     'i:' .. me)
if not s[1] then
  redis.call('HSET', H, 'gen', '0', 'parties', ARGV[3])
  s = {'0', ARGV[3]}
end
local gen = tonumber(s[1])
if tonumber(s[2]) ~= P then
  return {-4, gen, tonumber(s[2]), ''}
end
-- A resend of an arrival whose reply was lost.
if s[4] == me then
  return {1, gen - 1, tonumber(s[5]), ''}
end
if s[6] then
  return {0, gen, tonumber(s[6]), ''}
end
if s[3] then
  return {-1, gen, 0, s[3]}
end
if ARGV[4] == 'e' and gen % 2 == 1 then
  return {-3, gen, 0, ''}
end
if barrier_lapsed(Z, now) then
  barrier_break(H, LAPSED)
  return {-1, gen, 0, LAPSED}
end
local idx = redis.call('ZCARD', Z)
redis.call('ZADD', Z, string.format('%d', now + tonumber(ARGV[2])), me)
if idx + 1 < P then
  redis.call('HSET', H, 'i:' .. me, idx)
  return {0, gen, idx, ''}
end
barrier_end(H, Z, gen, me, idx)
if ARGV[4] == 'b' then
  redis.call('DEL', Z)
end
redis.pcall('PUBLISH', H, 'trip')
return {1, gen, idx, ''}
