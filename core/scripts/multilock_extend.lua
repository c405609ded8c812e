-- Extend a multi-key lock, and the watchdog's renewal of it: reset
-- (ARGV[3] 'set' or absent) or add to (ARGV[3] == 'add') the TTL of every
-- key, only if the caller's token holds every one; else change nothing.
-- KEYS[1..n] lock keys. ARGV[1] owner token, ARGV[2] ms.
-- Returns the smallest new TTL in ms, or -i if key i is not held.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_multilock.lua
return renew_multilock(KEYS, ARGV[1], ARGV[2], ARGV[3])
