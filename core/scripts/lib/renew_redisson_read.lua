-- @include redisson.lua
-- renew_redisson_read(K, owner, ms): a Redisson read lock's holds of owner
-- (hash K[1]) live ms more, as Redisson's watchdog renews them: every hold
-- key, and the hash for at least as long. Returns 1 if renewed, 0 if owner
-- holds no read.
local function renew_redisson_read(K, owner, ms)
  local n = tonumber(redis.call('HGET', K[1], owner))
  if not n then
    return 0
  end
  for i = 1, n do
    redis.call('PEXPIRE', redisson_hold_key(K[1], owner, i), ms)
  end
  if redis.call('PTTL', K[1]) < tonumber(ms) then
    redis.call('PEXPIRE', K[1], ms)
  end
  return 1
end
