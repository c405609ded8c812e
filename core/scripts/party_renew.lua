-- Renew a latch's or barrier's registered party while its lease is live:
-- the lease ends ttl from now on the server's clock. A lapsed party is
-- never revived (it marks the latch or barrier broken).
-- KEYS[1] parties zset. ARGV[1] party id, ARGV[2] ttl in ms.
-- Returns 1 if renewed, 0 if the party is gone or lapsed.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_party.lua
return renew_party(KEYS, ARGV[1], ARGV[2])
