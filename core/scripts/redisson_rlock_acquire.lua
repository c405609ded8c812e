-- Grant or re-enter a reentrant lock in Redisson's layout (RLock), so that
-- Java services on Redisson and hilock exclude each other.
-- KEYS[1] the lock hash, named as Redisson names it {owner -> hold count};
-- the other keys hilock's rlock passes are not used.
-- ARGV[1] owner (client id:thread id), ARGV[2] lease in ms.
-- Returns {1, 0, count} when granted (no fence: Redisson's RLock keeps
-- none), {0, holder's pttl} when held.
-- @once: a resend would count twice, so a broken connection is reported.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
if redis.call('EXISTS', KEYS[1]) == 0 or
    redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0, n}
end
return {0, redis.call('PTTL', KEYS[1])}
