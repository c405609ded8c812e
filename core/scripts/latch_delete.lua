-- Delete a countdown latch (its count, its broken mark and its parties):
-- the name starts afresh with the next call. Its waiters are told, and
-- their next look makes the latch again with their count. Safe to resend.
-- KEYS[1] latch hash, KEYS[2] parties zset (same hash tag).
-- Returns the number of keys deleted.
local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.pcall('PUBLISH', KEYS[1], 'deleted')
return n
