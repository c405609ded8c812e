-- Renew a reentrant lock while the owner still holds it.
-- KEYS[1] owners hash, KEYS[2] lock-delay marker (optional). ARGV[1] owner,
-- ARGV[2] ttl in ms.
-- Returns 1 if renewed, 0 if not held by this owner.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_rlock.lua
return renew_rlock(KEYS, ARGV[1], ARGV[2])
