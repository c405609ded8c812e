-- renew_rwlock_read(K, owner, ms): a read hold (K[1] readers zset, K[2]
-- read hold counts) lasts ms more while owner holds it. Returns 1 if
-- renewed, 0 if this owner holds no read.
-- @include rw_purge.lua
local function renew_rwlock_read(K, owner, ms)
  local now = purge_readers(K[1], K[2])
  if not redis.call('ZSCORE', K[1], owner) then
    return 0
  end
  keep_read(K[1], K[2], owner, now, ms)
  return 1
end
