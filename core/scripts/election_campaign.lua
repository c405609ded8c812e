-- Grant the lead of an election: the leadership hash {[owner] = value,
-- fence = n} with PX = ttl, and tell the observers (a message on the
-- channel named as the hash).
-- KEYS[1] leadership hash, KEYS[2] fence counter (same hash tag), KEYS[3]
-- the standbys' wake list
-- ARGV[1] owner token, ARGV[2] ttl in ms, ARGV[3] "woken" (any other
-- value: not rung), ARGV[4] the value
-- Returns {1, fence} when granted, {0, the leader's pttl} while another
-- leads.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include election.lua
local cur = leader_of(KEYS[1])
-- A standby rung by a resignation takes the wake-up in this round trip;
-- none left (another process's standby took it): not its turn.
if cur ~= ARGV[1] and ARGV[3] == 'woken' and
    redis.call('LPOP', KEYS[3]) == false then
  local pttl = redis.call('PTTL', KEYS[1])
  return {0, pttl == -2 and 0 or pttl}
end
if cur == nil then
  -- The fence first: a damaged counter fails before the lead is written.
  local fence = next_fence(KEYS[2])
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4], 'fence',
             string.format('%d', fence))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.pcall('PUBLISH', KEYS[1], 'lead')
  return {1, fence}
end
if cur == ARGV[1] then
  -- A resend of our own grant (its reply lost to a broken connection).
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
return {0, redis.call('PTTL', KEYS[1])}
