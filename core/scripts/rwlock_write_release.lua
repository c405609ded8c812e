-- Leave the write hold once. The last leave deletes it, then: readers that
-- waited are admitted as one batch ahead of the waiting writers (each gets
-- a wake-up), so writers cannot starve readers; with no reader waiting,
-- the next writer is woken (unless a reader, e.g. the releaser after a
-- downgrade, still holds).
-- KEYS[1] writer hash, KEYS[2] readers zset, KEYS[3] read hold counts,
-- KEYS[4] waiting writers zset, KEYS[5] waiting readers zset, KEYS[6]
-- admitted readers zset, KEYS[7] readers' wake list, KEYS[8] writers' wake
-- list, KEYS[9] the owner's done marker, KEYS[10] lock-delay marker
-- (optional: the last leave deletes it, a release frees the name at once).
-- ARGV[1] owner, ARGV[2] the call's nonce, ARGV[3] how long the done marker
-- lives in ms, ARGV[4] (optional) the nonce of an acquire to undo (see
-- resend.lua).
-- Returns the remaining hold count (0: released), or -1 if this owner does
-- not hold it, -2 if the acquire to undo did not apply (nothing changes).
-- Safe to resend (see resend.lua): a resend answers as the first run did.
-- @include rw_purge.lua
-- @include resend.lua
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local n, last = leave_level(KEYS[1], KEYS[9], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if not last then
  return n
end
if KEYS[10] then
  redis.call('DEL', KEYS[10])
end
local now = purge_readers(KEYS[2], KEYS[3])
for i = 4, 6 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
end
local writers = redis.call('ZCARD', KEYS[4]) > 0
if redis.call('ZCARD', KEYS[5]) > 0 then
  redis.call('ZUNIONSTORE', KEYS[6], 2, KEYS[6], KEYS[5], 'AGGREGATE', 'MAX')
  redis.call('DEL', KEYS[5])
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[6], tonumber(last[2]) - now)
  wake_n(KEYS[7], redis.call('ZCARD', KEYS[6]))
  -- A waiting writer learns that it now waits for the admitted readers
  -- (bounded by their expiry, should one of them never come).
  if writers then
    wake_n(KEYS[8], 1)
  end
elseif writers and redis.call('ZCARD', KEYS[2]) == 0 then
  wake_n(KEYS[8], 1)
end
return 0
