-- Take or re-enter the read side of a Redisson RReadWriteLock: one hash
-- <name> {mode = read|write, reader owner -> count, writer owner:write ->
-- count}; each read hold also has a key of its own (redisson_hold_key) that
-- expires with its lease, as Redisson keeps them.
-- KEYS[1] the lock hash (the other keys hilock's rlock passes are unused).
-- ARGV[1] owner, ARGV[2] lease in ms.
-- Readers share; the writer that holds it may also read (a downgrade).
-- Returns {1, 0, count} when granted (no fence), {0, pttl} when a writer
-- holds it.
-- @once: a resend would count twice, so a broken connection is reported.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include redisson.lua
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == 'write' and
    redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':write') == 0 then
  return {0, redis.call('PTTL', KEYS[1])}
end
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'read')
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('SET', redisson_hold_key(KEYS[1], ARGV[1], n), 1, 'PX', ARGV[2])
if mode == false or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, 0, n}
