-- Take or re-enter the write side of a Redisson RReadWriteLock (the hash of
-- redisson_read_acquire.lua; the writer's field is owner:write).
-- KEYS[1] the lock hash. ARGV[1] the writer's field (owner:write), ARGV[2]
-- lease in ms. As in Redisson, a re-entry adds the lease to the TTL left.
-- Returns {1, 0, count} when granted (no fence), {0, pttl} when held by
-- readers or another writer.
-- @once: a resend would count twice, so a broken connection is reported.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0, 1}
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]) + ARGV[2])
  return {1, 0, n}
end
return {0, redis.call('PTTL', KEYS[1])}
