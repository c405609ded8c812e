-- The watchdog's renewal of a sequential lock holder's session.
-- KEYS[1] hilock:{name}:seq:session, KEYS[2] :seq:queue, KEYS[3]
-- :seq:holder. ARGV[1] owner, ARGV[2] ttl ms.
-- Returns 1 renewed, 0 not owned (the session lapsed or the grant is
-- another's); an expired session is never revived.
-- The queue's and holder's expiry is kept at least as long as the
-- session's, so the entry's place and grant never lapse before it.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_seqlock.lua
return renew_seqlock(KEYS, ARGV[1], ARGV[2])
