-- Renew a read hold while its owner still holds it.
-- KEYS[1] readers zset, KEYS[2] read hold counts. ARGV[1] owner, ARGV[2]
-- ttl in ms. Returns 1 if renewed, 0 if this owner holds no read.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_rwlock_read.lua
return renew_rwlock_read(KEYS, ARGV[1], ARGV[2])
