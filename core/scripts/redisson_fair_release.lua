-- Leave a Redisson RFairLock once; the last leave deletes the hash and
-- publishes Redisson's unlock message to the first waiter only.
-- KEYS[1] the lock hash, KEYS[2] the channel prefix
-- (redisson_lock__channel:...; a waiter listens on prefix:<its owner>).
-- ARGV[1] owner, ARGV[2] lease in ms.
-- Returns the remaining hold count (0: released), or -1 if not held by
-- this owner (nothing changed).
-- @once: a resend would count twice, so a broken connection is reported.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include clock.lua
-- @include redisson.lua
local queue = redisson_queue(KEYS[1], server_ms())
local n = redisson_leave(KEYS[1], ARGV[1], ARGV[2])
if n ~= 0 then
  return n
end
redis.call('DEL', KEYS[1])
redisson_next(queue, KEYS[2])
return 0
