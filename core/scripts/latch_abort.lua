-- Break a countdown latch whose count is above 0 (a party gave up): its
-- waiters are told at once and raise BrokenBarrier. A registered party
-- (ARGV[2] its id, else '') leaves the parties. Safe to resend.
-- KEYS[1] latch hash, KEYS[2] parties zset (same hash tag).
-- ARGV[1] the count a latch that does not exist yet starts with, ARGV[2]
-- the party's id or '', ARGV[3] the reason.
-- Returns 1 if this call broke it, 0 if it was broken already or its count
-- was 0 (nothing left to break).
-- @include latch.lua
local left, broken = latch_open(KEYS, ARGV[1], server_ms())
if ARGV[2] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
if broken or left == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'broken', ARGV[3])
redis.pcall('PUBLISH', KEYS[1], 'broken')
return 1
