-- Renew a Redisson read lock's holds while the owner still reads.
-- KEYS[1] the lock hash. ARGV[1] owner, ARGV[2] lease in ms.
-- Returns 1 if renewed, 0 if the owner holds no read.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_redisson_read.lua
return renew_redisson_read(KEYS, ARGV[1], ARGV[2])
