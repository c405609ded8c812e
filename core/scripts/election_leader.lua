-- The current leader of an election; writes nothing.
-- KEYS[1] leadership hash.
-- Returns {fence, value}, or {0, ''} when nobody leads.
-- @include election.lua
local owner, value = leader_of(KEYS[1])
if owner == nil then
  return {0, ''}
end
return {tonumber(redis.call('HGET', KEYS[1], 'fence')), value}
