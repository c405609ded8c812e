-- Operator release of a lock in redis-py's layout: delete it whoever holds
-- it, and tell hilock's waiters on the name's channel.
-- KEYS[1] the lock key, KEYS[2] the wake channel. Returns 1 if a lock was
-- deleted.
-- @wakes: PING goes first, so the woken hear before the caller does.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.pcall('PUBLISH', KEYS[2], '0')
  return 1
end
return 0
