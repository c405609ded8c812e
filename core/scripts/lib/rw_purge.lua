-- purge_readers(readers, counts): the server's clock in ms, after dropping
-- the read holds whose expiry has passed (zset readers: owner -> expiry)
-- and their hold counts (hash counts).
local function purge_readers(readers, counts)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
  for i = 1, #dead do
    redis.call('HDEL', counts, dead[i])
  end
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  return now
end
