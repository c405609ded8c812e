-- Leave the write hold once. The last leave deletes it and wakes the next
-- writer if one waits (and no reader, e.g. the releaser after a downgrade,
-- still holds), else the waiting readers.
-- KEYS[1] writer hash, KEYS[2] readers zset, KEYS[3] read hold counts,
-- KEYS[4] waiting writers zset, KEYS[5] readers' wake list, KEYS[6]
-- writers' wake list. ARGV[1] owner.
-- Returns the remaining hold count (0: released), or -1 if this owner does
-- not hold it (nothing changes).
-- @once: a resend would count twice, so a broken connection is reported.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #dead do
  redis.call('HDEL', KEYS[3], dead[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local wake
if redis.call('ZCARD', KEYS[4]) > 0 then
  if redis.call('ZCARD', KEYS[2]) == 0 then
    wake = KEYS[6]
  end
else
  -- One element; each reader it admits passes it on (read acquire).
  wake = KEYS[5]
end
if wake then
  if redis.call('LLEN', wake) == 0 then
    redis.call('RPUSH', wake, '1')
  end
  redis.call('PEXPIRE', wake, 5000)
end
return 0
