-- Release a multi-key lock: delete each key the caller's token still
-- holds, waking one waiter of each; leave every other key alone.
-- KEYS[1..n] lock keys, KEYS[n+1..2n] wake lists, KEYS[2n+1..3n] lock-delay
-- markers (only with ARGV[2] 'delay': deleted with their names' locks).
-- ARGV[1] owner token.
-- Returns {keys released, indexes of the keys not held by the token...}.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local delay = ARGV[2] == 'delay'
local n = #KEYS / (delay and 3 or 2)
local out = {0}
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if delay then
      redis.call('DEL', KEYS[2 * n + i])
    end
    wake_one(KEYS[n + i])
    out[1] = out[1] + 1
  else
    out[#out + 1] = i
  end
end
return out
