-- renew_rlock(K, owner, ms): the TTL of owners hash K[1] becomes ms while
-- owner holds it. Returns 1 if renewed, 0 if not held by this owner.
local function renew_rlock(K, owner, ms)
  if redis.call('HEXISTS', K[1], owner) == 1 then
    redis.call('PEXPIRE', K[1], ms)
    return 1
  end
  return 0
end
