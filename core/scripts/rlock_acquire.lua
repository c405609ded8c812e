-- Grant or re-enter a reentrant lock.
-- KEYS[1] owners hash {owner -> hold count}, KEYS[2] fence counter.
-- ARGV[1] owner (client id:thread id), ARGV[2] ttl in ms.
-- Returns {1, fence, count} when granted, {0, holder's pttl} when held.
-- @once: a resend would count twice, so a broken connection is reported.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
if redis.call('EXISTS', KEYS[1]) == 0 then
  local fence = next_fence(KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  -- Re-entry: count up and refresh the TTL; the fence is the grant's own.
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), n}
end
return {0, redis.call('PTTL', KEYS[1])}
