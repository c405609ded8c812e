-- A party of a countdown latch leaves without counting down or breaking
-- it: the undo of a join whose reply came too late. Safe to resend.
-- KEYS[1] latch hash, KEYS[2] parties zset. ARGV[1] the party's id.
-- Returns 1 if it was a party, else 0.
return redis.call('ZREM', KEYS[2], ARGV[1])
