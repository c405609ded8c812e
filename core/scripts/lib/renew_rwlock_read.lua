-- renew_rwlock_read(K, owner, ms): a read hold (K[1] readers zset, K[2]
-- read hold counts) lasts ms more while owner holds it. Returns 1 if
-- renewed, 0 if this owner holds no read.
-- @include rw_purge.lua
local function renew_rwlock_read(K, owner, ms)
  local now = purge_readers(K[1], K[2])
  local cur = redis.call('ZSCORE', K[1], owner)
  if not cur then
    return 0
  end
  local exp = now + tonumber(ms)
  if tonumber(cur) > exp then
    exp = tonumber(cur)
  end
  redis.call('ZADD', K[1], exp, owner)
  local last = redis.call('ZRANGE', K[1], -1, -1, 'WITHSCORES')
  local keep = tonumber(last[2]) - now
  redis.call('PEXPIRE', K[1], keep)
  redis.call('PEXPIRE', K[2], keep)
  return 1
end
