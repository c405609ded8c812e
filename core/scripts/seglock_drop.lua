-- Undo an ambiguous grant of a segmented lock: delete whichever segment
-- key holds the owner token (a grant whose reply never came), and wake a
-- waiter if one was deleted.
-- KEYS[1] wake list, KEYS[2..K+1] segment keys (one hash tag).
-- ARGV[1] owner token.
-- Returns the number of segments deleted (0 or 1).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local n = 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
if n > 0 then
  wake_one(KEYS[1])
end
return n
