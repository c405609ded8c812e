-- Renew a permit while it is live: its expiry becomes now + ttl on the
-- server's clock. An expired permit is never revived.
-- KEYS[1] permits zset. ARGV[1] permit id, ARGV[2] ttl in ms.
-- Returns 1 if renewed, 0 if the permit is not live.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[2])),
           ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(top[2]) - now))
return 1
