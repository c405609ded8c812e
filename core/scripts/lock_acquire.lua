-- Grant an exclusive lock with a fencing token.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] ttl in ms ("0": no expiry)
-- Returns {1, fence} when granted, {0, holder's pttl} when held.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
local cur = redis.call('GET', KEYS[1])
if cur == false then
  -- INCR first: if the counter key is damaged, fail before writing the lock.
  local fence = next_fence(KEYS[2])
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
  return {1, fence}
end
if cur == ARGV[1] then
  -- A resend of our own grant (reply lost to a broken connection): the
  -- grant is still ours, so it was the last one and the counter is its fence.
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
