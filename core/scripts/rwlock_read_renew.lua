-- Renew a read hold while its owner still holds it.
-- KEYS[1] readers zset, KEYS[2] read hold counts. ARGV[1] owner, ARGV[2]
-- ttl in ms. Returns 1 if renewed, 0 if this owner holds no read.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #dead do
  redis.call('HDEL', KEYS[2], dead[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur then
  return 0
end
local exp = now + tonumber(ARGV[2])
if tonumber(cur) > exp then
  exp = tonumber(cur)
end
redis.call('ZADD', KEYS[1], exp, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return 1
