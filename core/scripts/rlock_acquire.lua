-- Grant or re-enter a reentrant lock.
-- KEYS[1] owners hash {owner -> hold count}, KEYS[2] fence counter,
-- KEYS[3] wake list (only with ARGV[4]), KEYS[4] lock-delay marker
-- (optional: every grant checks it, whatever its own delay; set with
-- ARGV[5]).
-- ARGV[1] owner (client id:thread id), ARGV[2] ttl in ms, ARGV[3] the
-- call's nonce, ARGV[4] "woken" (optional; any other value: not woken): a
-- waiter rung by a release takes the release's wake-up here, in its
-- attempt's round trip; none left (a waiter of another process took it)
-- means not its turn (told the holder's pttl, 0 if the lock is free),
-- ARGV[5] this grant's lock delay in ms (optional, > 0).
-- Returns {1, fence, count} when granted, {0, holder's pttl} when held,
-- {0, the marker's pttl} while a lost grant's lock delay runs.
-- Safe to resend: a grant records its nonce in field '<owner>:op' (owners
-- end in a thread id, so never in ':op'), and a resend that finds it there
-- answers as the first run did without counting again.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include delay.lua
local op = ARGV[1] .. ':op'
if redis.call('HGET', KEYS[1], op) == ARGV[3] then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'),
          tonumber(redis.call('HGET', KEYS[1], ARGV[1]))}
end
if ARGV[4] == 'woken' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and
    redis.call('LPOP', KEYS[3]) == false then
  local pttl = redis.call('PTTL', KEYS[1])
  return {0, pttl == -2 and 0 or pttl}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A grant that ended without its holder's release (expired, holder lost)
  -- leaves its delay marker: no grant until it expires.
  local delay = delay_left(KEYS[4])
  if delay > 0 then
    return {0, delay}
  end
  local fence = next_fence(KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, op, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  set_delay(KEYS[4], ARGV[5], ARGV[2])
  return {1, fence, 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  -- Re-entry: count up and refresh the TTL; the fence is the grant's own.
  -- It neither sets nor drops a marker; the grant's marker, if it has one,
  -- keeps outliving the TTL by the delay.
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('HSET', KEYS[1], op, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[4] then
    push_delay(KEYS[4], ARGV[2])
  end
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), n}
end
return {0, redis.call('PTTL', KEYS[1])}
