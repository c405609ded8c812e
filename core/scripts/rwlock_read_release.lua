-- Leave a read hold once; the last reader out wakes a waiting writer.
-- KEYS[1] readers zset, KEYS[2] read hold counts, KEYS[3] writer hash,
-- KEYS[4] waiting writers zset, KEYS[5] admitted readers zset, KEYS[6] the
-- writers' wake list, KEYS[7] the owner's done marker. ARGV[1] owner,
-- ARGV[2] the call's nonce, ARGV[3] how long the done marker lives in ms,
-- ARGV[4] (optional) the nonce of an acquire to undo (see resend.lua).
-- Returns the remaining hold count (0: released), or -1 if this owner holds
-- no read (never did, or it expired), -2 if the acquire to undo did not
-- apply; nothing changes then.
-- Safe to resend (see resend.lua): a resend answers as the first run did.
-- @include rw_purge.lua
-- @include resend.lua
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local now = purge_readers(KEYS[1], KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local me = ARGV[1]
local again = resent_release(KEYS[2], KEYS[7], me, ARGV[2], ARGV[4])
if again then
  return again
end
if not redis.call('ZSCORE', KEYS[1], me) then
  return -1
end
local n = redis.call('HINCRBY', KEYS[2], me, -1)
if n > 0 then
  redis.call('HSET', KEYS[2], me .. ':op', ARGV[2])
  return n
end
redis.call('ZREM', KEYS[1], me)
redis.call('HDEL', KEYS[2], me, me .. ':op')
released(KEYS[7], ARGV[2], ARGV[3])
-- The writer goes once every reader is out, including admitted readers
-- still on their way in.
if redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[5]) == 0
    and redis.call('EXISTS', KEYS[3]) == 0
    and redis.call('ZCARD', KEYS[4]) > 0 then
  wake_one(KEYS[6])
end
return 0
