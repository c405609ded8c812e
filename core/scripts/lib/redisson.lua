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
-- redisson_tag(lock): the part of an auxiliary key that puts it in the
-- lock's slot, as Redisson builds it: {lock}, or lock itself when the name
-- has its own hash tag. redisson_hold_key(lock, owner, n): the key that
-- keeps a read lock's n-th hold of owner alive.
local function redisson_tag(lock)
  return string.find(lock, '{', 1, true) and lock or ('{' .. lock .. '}')
end
local function redisson_hold_key(lock, owner, n)
  return redisson_tag(lock) .. ':' .. owner .. ':rwlock_timeout:' .. n
end
-- redisson_queue(lock, now): a Redisson fair lock's waiter list and
-- deadline zset (redisson_lock_queue:{lock}, redisson_lock_timeout:{lock},
-- in the lock's slot), after dropping the waiters at the head whose
-- deadline (ms) passed, as Redisson's scripts do first.
local function redisson_queue(lock, now)
  local queue = 'redisson_lock_queue:' .. redisson_tag(lock)
  local zset = 'redisson_lock_timeout:' .. redisson_tag(lock)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then
      break
    end
    local deadline = redis.call('ZSCORE', zset, head)
    if not deadline or tonumber(deadline) > now then
      break
    end
    redis.call('ZREM', zset, head)
    redis.call('LPOP', queue)
  end
  return queue, zset
end
-- redisson_next(queue, channel): Redisson's fair unlock message, 0 on the
-- channel of the first waiter only (channel:<its owner>).
local function redisson_next(queue, channel)
  local head = redis.call('LINDEX', queue, 0)
  if head then
    redisson_unlocked(channel .. ':' .. head, '0')
  end
end
