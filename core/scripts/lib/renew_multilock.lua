-- renew_multilock(K, owner, ms, mode, locks): reset (mode 'set' or nil) or
-- add to (mode 'add') the TTL of every lock key in K[1..locks] (nil: all of
-- K), only if owner holds every one; else change nothing. K[locks+1..2 *
-- locks], when given: the names' lock-delay markers, each set to its name's
-- new TTL plus the delay it holds. Returns the smallest new TTL in ms, or
-- -i if key i is not held.
local function renew_multilock(K, owner, ms, mode, locks)
  local nlock = locks or #K
  for i = 1, nlock do
    if redis.call('GET', K[i]) ~= owner then
      return -i
    end
  end
  local least = nil
  for i = 1, nlock do
    local t = tonumber(ms)
    if mode == 'add' then
      local left = redis.call('PTTL', K[i])
      if left > 0 then
        t = t + left
      end
    end
    redis.call('PEXPIRE', K[i], t)
    local marker = K[#K - nlock + i]
    local delay = nlock < #K and tonumber(redis.call('GET', marker))
    if delay then
      redis.call('PEXPIRE', marker, t + delay)
    end
    if least == nil or t < least then
      least = t
    end
  end
  return least
end

-- A multi-key lock with a lock delay: K is its lock keys, then as many
-- delay markers.
local function renew_multilock_delay(K, owner, ms, mode)
  return renew_multilock(K, owner, ms, mode, #K / 2)
end
