-- Release a lock in redis-py's layout: delete the key only if the caller's
-- token still holds it (redis-py's own compare-and-delete), and tell
-- hilock's waiters on the name's channel. A release by redis-py itself
-- publishes nothing: hilock's waiters notice it within their bounded sleep.
-- KEYS[1] the lock key, KEYS[2] the wake channel (hilock:redis-py:<name>).
-- ARGV[1] owner token.
-- Returns 1 if deleted, else 0.
-- @wakes: PING goes first, so the woken hear before the caller does.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', KEYS[2], '0')
  return 1
end
return 0
