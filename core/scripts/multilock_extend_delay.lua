-- Extend a multi-key lock that has a lock delay, and the watchdog's renewal
-- of it: as multilock_extend.lua, and each name's delay marker is set to
-- the name's new TTL plus the delay.
-- KEYS[1..n] lock keys, KEYS[n+1..2n] their lock-delay markers. ARGV[1]
-- owner token, ARGV[2] ms, ARGV[3] 'set' (or absent) or 'add'.
-- Returns the smallest new TTL in ms, or -i if key i is not held.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_multilock.lua
return renew_multilock_delay(KEYS, ARGV[1], ARGV[2], ARGV[3])
