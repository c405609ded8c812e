-- Grant or re-enter the write hold of a read-write lock, with a fencing
-- token.
-- KEYS[1] writer hash {owner -> count, 'fence' -> fence of the grant},
-- KEYS[2] readers zset, KEYS[3] read hold counts, KEYS[4] waiting writers
-- zset {owner -> intent expiry in ms of server time}, KEYS[5] admitted
-- readers zset, KEYS[6] fence counter, KEYS[7] writers' wake list (only
-- with ARGV[5]), KEYS[8] lock-delay marker (optional: every grant checks
-- it, whatever its own delay; set with ARGV[6]).
-- ARGV[1] owner (client id:thread id), ARGV[2] ttl in ms, ARGV[3] '1' if
-- the caller will wait (a refusal then records or refreshes its intent,
-- which holds new readers back until it expires one ttl later), ARGV[4]
-- the call's nonce, ARGV[5] "woken" (optional): a writer rung by a release takes the release's
-- wake-up here, in its attempt's round trip; none left (a writer of
-- another process took it) and it is not its turn: it is told 0 and looks
-- again in 1 ms. ARGV[6] this grant's lock delay in ms (optional, > 0).
-- Returns {1, fence, count} when granted, {0, ms until the blocker lapses}
-- when held (or admitted readers are on their way in, or a lost write
-- grant's lock delay runs), {-1, 0} if the owner holds a read (an upgrade
-- would deadlock).
-- Safe to resend: a grant records its nonce in KEYS[1] field
-- '<owner>:op' (never 'fence': owners end in a thread id), and a resend
-- that finds it there answers as the first run did.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include rw_purge.lua
-- @include delay.lua
local now = purge_readers(KEYS[2], KEYS[3])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local me = ARGV[1]
local ttl = tonumber(ARGV[2])
if redis.call('HGET', KEYS[1], me .. ':op') == ARGV[4] then
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence') or '0'),
          tonumber(redis.call('HGET', KEYS[1], me))}
end
if redis.call('HEXISTS', KEYS[1], me) == 1 then
  -- Re-entry: count up; the fence is the grant's own.
  local n = redis.call('HINCRBY', KEYS[1], me, 1)
  redis.call('HSET', KEYS[1], me .. ':op', ARGV[4])
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
    if KEYS[8] then
      push_delay(KEYS[8], ttl)
    end
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence') or '0'), n}
end
if redis.call('ZSCORE', KEYS[2], me) then
  return {-1, 0}
end
local turn = ARGV[5] ~= 'woken' or redis.call('LPOP', KEYS[7]) ~= false
local wait
if redis.call('EXISTS', KEYS[1]) == 1 then
  wait = redis.call('PTTL', KEYS[1])
else
  for _, k in ipairs({KEYS[2], KEYS[5]}) do
    local r = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
    if #r > 0 and (not wait or tonumber(r[2]) - now > wait) then
      wait = tonumber(r[2]) - now
    end
  end
  -- A write grant that ended without its holder's release (expired,
  -- holder lost) leaves its delay marker: no grant until it expires.
  local delay = delay_left(KEYS[8])
  if delay > 0 and (not wait or delay > wait) then
    wait = delay
  end
end
if not wait and not turn then
  wait = 0
end
if wait then
  if ARGV[3] == '1' then
    wait_in(KEYS[4], me, now, ttl)
  end
  return {0, wait}
end
-- The fence first: a damaged counter fails before the lock is written.
local fence = next_fence(KEYS[6])
redis.call('HSET', KEYS[1], me, 1, 'fence', fence, me .. ':op', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
set_delay(KEYS[8], ARGV[6], ttl)
redis.call('ZREM', KEYS[4], me)
return {1, fence, 1}
