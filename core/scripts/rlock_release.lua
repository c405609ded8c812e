-- Leave a reentrant lock once; the last leave deletes it and wakes one
-- waiter.
-- KEYS[1] owners hash, KEYS[2] wake list, KEYS[3] the owner's done marker,
-- KEYS[4] lock-delay marker (optional): the last leave deletes it (a
-- release frees the name at once), another keeps it the delay past the TTL.
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] the call's nonce, ARGV[4] how
-- long the done marker lives in ms (the client's resend window), ARGV[5]
-- (optional) the nonce of an acquire whose outcome the caller does not
-- know: leave the level only if that acquire was the owner's last call.
-- Returns the remaining hold count (0: released), or -1 if not held by
-- this owner, -2 if the acquire to undo did not apply (nothing changed).
-- Safe to resend: a release that leaves levels records its nonce in field
-- '<owner>:op'; the last one deletes the hash and writes its nonce to the
-- done marker, so a resend of either answers as the first run did.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
-- @include resend.lua
-- @include delay.lua
local n, last = leave_level(KEYS[1], KEYS[3], ARGV[1], ARGV[3], ARGV[4], ARGV[5],
                            ARGV[2])
if last then
  if KEYS[4] then
    redis.call('DEL', KEYS[4])
  end
  wake_one(KEYS[2])
elseif n > 0 and KEYS[4] then
  push_delay(KEYS[4], redis.call('PTTL', KEYS[1]))
end
return n
