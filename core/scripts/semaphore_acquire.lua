-- Take one permit of a counting semaphore.
-- KEYS[1] permits zset {permit id -> expiry in ms on the server's clock},
-- KEYS[2] limit (string), KEYS[3] permit wake list; one hash tag.
-- ARGV[1] permit id, ARGV[2] ttl in ms, ARGV[3] the caller's permit count,
-- stored as the limit if none is stored yet (the stored limit wins),
-- ARGV[4] "woken" (optional): a waiter rung by a release takes the
-- release's wake-up here, in its attempt's round trip; none left (a waiter
-- of another process took it) means not its turn.
-- Returns {1, permits still free} when granted, {0, ms until the first
-- permit expires (-1: none is held)} when none is free.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include sem_wake.lua
-- @include clock.lua
-- @include sem_limit.lua
local limit, raw = sem_limit(KEYS[2], ARGV[3])
if not limit then return raw end
-- Expiry is judged on the server's clock only.
local now = server_ms()
local freed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not raw then
  redis.call('SET', KEYS[2], ARGV[3])
end


if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  -- A resend of our own grant (its reply was lost): still ours.
  return {1, math.max(0, limit - redis.call('ZCARD', KEYS[1]))}
end
local used = redis.call('ZCARD', KEYS[1])
if ARGV[4] == 'woken' and redis.call('LPOP', KEYS[3]) == false then
  -- Not this waiter's turn: look again at once if a permit is free (its
  -- taker is on the way), else when the first permit expires.
  if used < limit then
    return {0, 0}
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, first[2] and math.max(1, tonumber(first[2]) - now) or -1}
end
if used < limit then
  redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])),
             ARGV[1])
  -- The set lives as long as its longest permit.
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(top[2]) - now))
  sem_wake(KEYS[3], freed, limit - used - 1)
  return {1, limit - used - 1}
end
sem_wake(KEYS[3], freed, limit - used)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  return {0, math.max(1, tonumber(first[2]) - now)}
end
return {0, -1}
