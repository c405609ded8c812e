-- Grant or re-enter a read hold of a read-write lock.
-- KEYS[1] readers zset {owner -> expiry in ms of server time}, KEYS[2] read
-- hold counts {owner -> count}, KEYS[3] writer hash, KEYS[4] waiting
-- writers zset {owner -> intent expiry}, KEYS[5] waiting readers zset
-- {owner -> expiry}, KEYS[6] admitted readers zset {owner -> expiry}: the
-- readers a write release let in ahead of the waiting writers, KEYS[7]
-- readers' wake list (only with ARGV[5]), KEYS[8] the write side's
-- lock-delay marker (optional).
-- ARGV[1] owner (client id:thread id), ARGV[2] ttl in ms, ARGV[3] '1' if
-- the caller will wait (a refusal then records or refreshes it as a
-- waiting reader, admitted at the next write release), ARGV[4] the call's
-- nonce, ARGV[5] "woken" (optional): a reader rung by a release takes one
-- of its wake-ups when it is granted (a refused one leaves them to the
-- readers let in).
-- Returns {1, hold count} when granted, {0, ms until the blocker lapses}
-- when a writer holds it or waits (and this reader was not admitted), or
-- while a lost write grant's lock delay runs (a new reader only: a zombie
-- writer may still be writing).
-- Safe to resend: a grant records its nonce in KEYS[2] field '<owner>:op',
-- and a resend that finds it there answers as the first run did.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include rw_purge.lua
-- @include delay.lua
local now = purge_readers(KEYS[1], KEYS[2])
for i = 4, 6 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
end
local me = ARGV[1]
local ttl = tonumber(ARGV[2])
if redis.call('HGET', KEYS[2], me .. ':op') == ARGV[4] then
  return {1, tonumber(redis.call('HGET', KEYS[2], me))}
end
local function refused(ms)
  if ARGV[3] == '1' then
    wait_in(KEYS[5], me, now, ttl)
  end
  return {0, ms}
end
local writer = redis.call('EXISTS', KEYS[3]) == 1
if writer and redis.call('HEXISTS', KEYS[3], me) == 0 then
  return refused(redis.call('PTTL', KEYS[3]))
end
local cur = redis.call('ZSCORE', KEYS[1], me)
local held_back = not cur and not writer and delay_left(KEYS[8]) or 0
if held_back > 0 then
  return refused(held_back)
end
-- A new reader queues behind a waiting writer unless a write release
-- admitted it; a re-entry or the writer's own read (a downgrade) does not
-- queue, or it would wait for itself.
if not cur and not writer and not redis.call('ZSCORE', KEYS[6], me) then
  local w = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if #w > 0 then
    return refused(tonumber(w[2]) - now)
  end
end
local n = redis.call('HINCRBY', KEYS[2], me, 1)
redis.call('HSET', KEYS[2], me .. ':op', ARGV[4])
keep_read(KEYS[1], KEYS[2], me, now, ttl)
redis.call('ZREM', KEYS[5], me)
redis.call('ZREM', KEYS[6], me)
if ARGV[5] == 'woken' then
  redis.call('LPOP', KEYS[7])
end
return {1, n}
