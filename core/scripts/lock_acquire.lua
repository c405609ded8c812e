-- Grant an exclusive lock with a fencing token.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash tag), KEYS[3] wake list
-- (optional, with ARGV[3]), KEYS[4] lock-delay marker (optional: every
-- grant of hilock's checks it, whatever its own delay; set with ARGV[4])
-- ARGV[1] owner token, ARGV[2] ttl in ms ("0": no expiry), ARGV[3]
-- "woken" (optional; any other value: not woken), ARGV[4] this grant's lock
-- delay in ms (optional, > 0)
-- Returns {1, fence} when granted, {0, holder's pttl} when held, {0, the
-- marker's pttl} while a lost grant's lock delay runs.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include delay.lua
local cur = redis.call('GET', KEYS[1])
-- A waiter rung by a release passes the wake list (KEYS[3]) and ARGV[3]
-- "woken": it takes the release's wake-up here, in its attempt's round
-- trip. None left (a waiter of another process took it): not its turn; it
-- is told the holder's pttl, 0 if the lock is free (it looks again in 1 ms).
-- A resend of our own grant is recognised first (below).
if cur ~= ARGV[1] and ARGV[3] == 'woken' and
    redis.call('LPOP', KEYS[3]) == false then
  local pttl = redis.call('PTTL', KEYS[1])
  return {0, pttl == -2 and 0 or pttl}
end
if cur == false then
  -- A grant that ended without its holder's release (expired, holder lost)
  -- leaves its delay marker: no grant until it expires.
  local delay = delay_left(KEYS[4])
  if delay > 0 then
    return {0, delay}
  end
  -- The fence first: a damaged counter fails before the lock is written.
  local fence = next_fence(KEYS[2])
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
    set_delay(KEYS[4], ARGV[4], ttl)
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
  return {1, fence}
end
if cur == ARGV[1] then
  -- A resend of our own grant (reply lost to a broken connection): the
  -- grant is still ours, so it was the last one and the counter is its fence.
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
