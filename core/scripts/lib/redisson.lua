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
-- redisson_leave(key, field, ms): one leave of field's hold in hash key:
-- -1 if it holds none (nothing changes), else the count left (> 0: the
-- hash's TTL is ms again; 0: the field is gone, the rest is the caller's).
local function redisson_leave(key, field, ms)
  if redis.call('HEXISTS', key, field) == 0 then
    return -1
  end
  local n = redis.call('HINCRBY', key, field, -1)
  if n > 0 then
    redis.call('PEXPIRE', key, ms)
    return n
  end
  redis.call('HDEL', key, field)
  return 0
end
-- redisson_write_gone(key, channel): the writer of a read-write lock left
-- (its field is gone): the hash goes unless the writer also reads (then it
-- is read-held: a downgrade), and everyone waiting is told (message 1).
local function redisson_write_gone(key, channel)
  if redis.call('HLEN', key) == 1 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'mode', 'read')
  end
  redisson_unlocked(channel, '1')
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
