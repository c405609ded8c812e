-- Read-only: who holds a read-write lock, for deadlock detection
-- (core/src/deadlock.c): a writer waits for the writer, else for every
-- reader.
-- KEYS[1] writer hash, KEYS[2] readers zset (owner -> expiry, server ms).
-- Returns the owners: the writer's (its fields but 'fence' and
-- '<owner>:op'), else the readers whose holds have not lapsed.
-- @include clock.lua
local out = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f ~= 'fence' and string.sub(f, -3) ~= ':op' then
    out[#out + 1] = f
  end
end
if #out > 0 then
  return out
end
return redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. server_ms(), '+inf')
