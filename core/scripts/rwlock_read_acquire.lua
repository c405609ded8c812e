-- Grant or re-enter a read hold of a read-write lock.
-- KEYS[1] readers zset {owner -> expiry in ms of server time}, KEYS[2] read
-- hold counts {owner -> count}, KEYS[3] writer hash, KEYS[4] waiting
-- writers zset {owner -> intent expiry in ms of server time}, KEYS[5] the
-- readers' wake list.
-- ARGV[1] owner (client id:thread id), ARGV[2] ttl in ms, ARGV[3] '1' if
-- the caller had to wait (its grant then wakes the next waiting reader).
-- Returns {1, hold count} when granted, {0, ms until the blocker lapses}
-- when a writer holds it or a writer waits (writer preference).
-- @once: a resend would count twice, so a broken connection is reported.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #dead do
  redis.call('HDEL', KEYS[2], dead[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local me = ARGV[1]
local writer = redis.call('EXISTS', KEYS[3]) == 1
if writer and redis.call('HEXISTS', KEYS[3], me) == 0 then
  return {0, redis.call('PTTL', KEYS[3])}
end
local cur = redis.call('ZSCORE', KEYS[1], me)
-- A new reader queues behind a waiting writer; a re-entry or the writer's
-- own read (a downgrade) does not, or it would wait for itself.
if not cur and not writer then
  local w = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if #w > 0 then
    return {0, tonumber(w[2]) - now}
  end
end
local n = redis.call('HINCRBY', KEYS[2], me, 1)
local exp = now + tonumber(ARGV[2])
if cur and tonumber(cur) > exp then
  exp = tonumber(cur)
end
redis.call('ZADD', KEYS[1], exp, me)
-- Both keys live as long as the longest read hold.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
if n == 1 and ARGV[3] == '1' then
  -- Chained wake-up: a woken reader passes the wake-up on, so a write
  -- release admits every waiting reader, one BLPOP at a time.
  if redis.call('LLEN', KEYS[5]) == 0 then
    redis.call('RPUSH', KEYS[5], '1')
  end
  redis.call('PEXPIRE', KEYS[5], 5000)
end
return {1, n}
