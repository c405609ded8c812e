-- purge_readers(readers, counts): the server's clock in ms, after dropping
-- the read holds whose expiry has passed (zset readers: owner -> expiry)
-- and their hold counts and last nonces (hash counts: owner and
-- '<owner>:op', see resend.lua).
local function purge_readers(readers, counts)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
  for i = 1, #dead do
    redis.call('HDEL', counts, dead[i], dead[i] .. ':op')
  end
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  return now
end
-- keep_read(readers, counts, owner, now, ms): owner's read hold lasts until
-- now + ms, or longer if it already does; both keys live as long as the
-- longest read hold.
local function keep_read(readers, counts, owner, now, ms)
  local exp = now + tonumber(ms)
  local cur = redis.call('ZSCORE', readers, owner)
  if cur and tonumber(cur) > exp then
    exp = tonumber(cur)
  end
  redis.call('ZADD', readers, exp, owner)
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  local keep = tonumber(last[2]) - now
  redis.call('PEXPIRE', readers, keep)
  redis.call('PEXPIRE', counts, keep)
end
-- wait_in(zset, owner, now, ms): record or refresh a waiter (owner ->
-- expiry now + ms); the zset lives as long as its latest waiter.
local function wait_in(zset, owner, now, ms)
  redis.call('ZADD', zset, now + ms, owner)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', zset, tonumber(last[2]) - now)
end
