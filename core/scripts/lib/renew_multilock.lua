-- renew_multilock(K, owner, ms, mode): reset (mode 'set' or nil) or add to
-- (mode 'add') the TTL of every lock key in K, only if owner holds every
-- one; else change nothing. Returns the smallest new TTL in ms, or -i if
-- key i is not held.
local function renew_multilock(K, owner, ms, mode)
  local n = #K
  for i = 1, n do
    if redis.call('GET', K[i]) ~= owner then
      return -i
    end
  end
  local least = nil
  for i = 1, n do
    local t = tonumber(ms)
    if mode == 'add' then
      local left = redis.call('PTTL', K[i])
      if left > 0 then
        t = t + left
      end
    end
    redis.call('PEXPIRE', K[i], t)
    if least == nil or t < least then
      least = t
    end
  end
  return least
end
