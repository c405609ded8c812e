-- Take or re-enter a Redisson RFairLock: the hash of an RLock, plus a FIFO
-- list of waiters and a zset of each waiter's deadline (redisson_queue),
-- which the first waiter must reach before anyone else is let in.
-- KEYS[1] the lock hash (the other keys hilock's rlock passes are unused).
-- ARGV[1] owner, ARGV[2] lease in ms, also a waiter's liveness budget: as
-- in Redisson, a waiter's deadline is its predecessor's plus the budget
-- (the lock's TTL for the first); a hilock waiter moves its own deadline
-- on at every attempt, so only a dead one is ever passed over. The server's
-- clock stands in for Redisson's client clock.
-- Returns {1, 0, count} when granted (no fence), {0, ms to sleep at most}
-- when queued (a release to this waiter publishes on its own channel).
-- @once: a resend would count twice, so a broken connection is reported.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include clock.lua
-- @include redisson.lua
local now = server_ms()
local budget = tonumber(ARGV[2])
local queue, zset = redisson_queue(KEYS[1], now)
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', queue, 0)
  if not head or head == ARGV[1] then
    if head then
      redis.call('LPOP', queue)
    end
    redis.call('ZREM', zset, ARGV[1])
    for _, waiter in ipairs(redis.call('ZRANGE', zset, 0, -1)) do
      redis.call('ZINCRBY', zset, -budget, waiter)
    end
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 0, 1}
  end
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0, n}
end
local pttl = redis.call('PTTL', KEYS[1])
-- Free but promised to an earlier waiter: nobody publishes until it holds
-- and releases, so look again soon.
local sleep = pttl > 0 and pttl or 100
local mine = redis.call('ZSCORE', zset, ARGV[1])
if mine then
  local deadline = now + math.max(pttl, 0) + budget
  if deadline > tonumber(mine) then
    redis.call('ZADD', zset, deadline, ARGV[1])
  end
  return {0, sleep}
end
local last = redis.call('LINDEX', queue, -1)
local ahead = last and redis.call('ZSCORE', zset, last)
local wait = ahead and tonumber(ahead) - now or math.max(pttl, 0)
redis.call('ZADD', zset, now + wait + budget, ARGV[1])
redis.call('RPUSH', queue, ARGV[1])
return {0, sleep}
