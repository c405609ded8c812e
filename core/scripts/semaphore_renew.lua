-- Renew a permit while it is live: its expiry becomes now + ttl on the
-- server's clock. An expired permit is never revived.
-- KEYS[1] permits zset. ARGV[1] permit id, ARGV[2] ttl in ms.
-- Returns 1 if renewed, 0 if the permit is not live.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_semaphore.lua
return renew_semaphore(KEYS, ARGV[1], ARGV[2])
