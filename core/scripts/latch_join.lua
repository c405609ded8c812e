-- Register a party of a countdown latch: its lease ends ttl from now on the
-- server's clock, and the watchdog renews it (party_renew.lua); a party
-- whose lease ends before it counts down breaks the latch. The waiters are
-- told (a message on the channel named as the hash). Safe to resend (a
-- live party joins once).
-- KEYS[1] latch hash, KEYS[2] parties zset (same hash tag).
-- ARGV[1] the count a latch that does not exist yet starts with, ARGV[2]
-- the party's id, ARGV[3] ttl in ms.
-- Returns {1, count left} when joined, {0, 0} when the count is 0 already
-- (nothing to join), {-1, reason} when the latch is broken.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include latch.lua
local now = server_ms()
local left, broken = latch_open(KEYS, ARGV[1], now)
if broken then
  return {-1, broken}
end
if left == 0 then
  return {0, 0}
end
if not redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[3])),
             ARGV[2])
  -- Waiters look again: a waiter asleep since before this join learns
  -- when its lease ends (and looks then).
  redis.pcall('PUBLISH', KEYS[1], 'join')
end
return {1, left}
