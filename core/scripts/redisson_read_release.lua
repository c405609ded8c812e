-- Leave the read side of a Redisson RReadWriteLock once. The hash then
-- lives as long as its longest-lived remaining read hold; with none left
-- (and no writer) it goes, and Redisson's unlock message 0 is published.
-- KEYS[1] the lock hash, KEYS[2] its channel (redisson_rwlock:...).
-- ARGV[1] owner, ARGV[2] lease in ms (unused).
-- Returns the owner's remaining read count (0: it reads no more), or -1 if
-- it holds no read (nothing changed).
-- @once: a resend would count twice, so a broken connection is reported.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include redisson.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('DEL', redisson_hold_key(KEYS[1], ARGV[1], n + 1))
if redis.call('HLEN', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local count = tonumber(redis.call('HGET', KEYS[1], field))
    for i = 1, count or 0 do
      longest = math.max(longest,
        redis.call('PTTL', redisson_hold_key(KEYS[1], field, i)))
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[1], longest)
    return n
  end
  if redis.call('HGET', KEYS[1], 'mode') == 'write' then
    return n
  end
end
redis.call('DEL', KEYS[1])
redisson_unlocked(KEYS[2], '0')
return n
