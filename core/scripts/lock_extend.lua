-- Reset (ARGV[3] 'set' or absent: renewal) or add to (ARGV[3] == 'add') the
-- lock's TTL, only while the caller's token holds it. An expired key stays
-- expired.
-- KEYS[1] lock key, KEYS[2] lock-delay marker (optional). ARGV[1] owner token, ARGV[2] ms.
-- Returns the new TTL in ms, or 0 if not owned.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_lock.lua
return renew_lock(KEYS, ARGV[1], ARGV[2], ARGV[3])
