-- renew_lock(K, owner, ms, mode): reset (mode 'set' or nil) or add to
-- (mode 'add') the TTL of lock key K[1] while owner holds it; an expired
-- key stays expired. K[2] (optional): the lock-delay marker, whose value is
-- the delay in ms; its TTL is set to the lock's new TTL plus the delay.
-- Returns the new TTL in ms, or 0 if not owned.
-- @include delay.lua
local function renew_lock(K, owner, ms, mode)
  if redis.call('GET', K[1]) ~= owner then
    return 0
  end
  ms = tonumber(ms)
  if mode == 'add' then
    local left = redis.call('PTTL', K[1])
    if left > 0 then
      ms = ms + left
    end
  end
  redis.call('PEXPIRE', K[1], ms)
  if K[2] then
    push_delay(K[2], ms)
  end
  return ms
end
