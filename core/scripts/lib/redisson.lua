-- redisson_unlocked(channel): tell the waiters of a Redisson lock that it
-- is free, as Redisson's own unlock does: the message 0 on the lock's
-- channel. Redisson listens with SUBSCRIBE, or on a Redis 7 cluster with
-- SSUBSCRIBE (shardedSubscriptionMode AUTO), so both are sent; a server
-- without sharded channels (or a user without the right) refuses the
-- second, which pcall ignores.
local function redisson_unlocked(channel)
  redis.pcall('PUBLISH', channel, '0')
  redis.pcall('SPUBLISH', channel, '0')
end
