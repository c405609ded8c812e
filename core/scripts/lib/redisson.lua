-- redisson_unlocked(channel, message): tell the waiters of a Redisson lock
-- that it is free, as Redisson's own unlock does: 0 (wake one; RLock, a read
-- release) or 1 (wake all; a write release). Redisson listens with
-- SUBSCRIBE, or on a Redis 7 cluster with SSUBSCRIBE (shardedSubscriptionMode
-- AUTO), so both are sent; a server without sharded channels (or a user
-- without the right) refuses the second, which pcall ignores.
local function redisson_unlocked(channel, message)
  redis.pcall('PUBLISH', channel, message)
  redis.pcall('SPUBLISH', channel, message)
end
-- redisson_hold_key(lock, owner, n): the key that keeps a read lock's n-th
-- hold of owner alive, named as Redisson names it ({lock}:owner:
-- rwlock_timeout:n, or lock:... when the name has its own hash tag), so it
-- lives in the lock's slot.
local function redisson_hold_key(lock, owner, n)
  local base = string.find(lock, '{', 1, true) and lock or ('{' .. lock .. '}')
  return base .. ':' .. owner .. ':rwlock_timeout:' .. n
end
