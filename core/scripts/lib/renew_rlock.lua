-- renew_rlock(K, owner, ms): the TTL of owners hash K[1] becomes ms while
-- owner holds it; K[2] (optional): the lock-delay marker, which then lives
-- ms plus the delay. Returns 1 if renewed, 0 if not held by this owner.
-- @include delay.lua
local function renew_rlock(K, owner, ms)
  if redis.call('HEXISTS', K[1], owner) == 1 then
    redis.call('PEXPIRE', K[1], ms)
    if K[2] then
      push_delay(K[2], ms)
    end
    return 1
  end
  return 0
end
