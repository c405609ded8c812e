-- Leave a reentrant lock once; the last leave deletes it and wakes one
-- waiter.
-- KEYS[1] owners hash, KEYS[2] wake list. ARGV[1] owner, ARGV[2] ttl in ms.
-- Returns the remaining hold count (0: released), or -1 if not held by
-- this owner (nothing changed).
-- @once: a resend would count twice, so a broken connection is reported.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return n
end
redis.call('DEL', KEYS[1])
wake_one(KEYS[2])
return 0
