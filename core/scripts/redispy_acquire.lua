-- Grant an exclusive lock in redis-py's layout (redis.lock.Lock), so that
-- Python services on redis-py and hilock exclude each other on one name.
-- KEYS[1] the lock key: the name as redis-py uses it (no prefix, no hash
-- tag added), holding the owner token; the other keys hilock's lock passes
-- are not used.
-- ARGV[1] owner token, ARGV[2] ttl in ms ("0": no expiry, redis-py's
-- timeout=None).
-- Returns {1, 0} when granted (no fence: redis-py's layout keeps none),
-- {0, holder's pttl} when held (-1: held without expiry).
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local cur = redis.call('GET', KEYS[1])
if cur == false then
  if tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
  return {1, 0}
end
if cur == ARGV[1] then
  -- A resend of our own grant (reply lost to a broken connection).
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
