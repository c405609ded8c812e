-- Redlock, one node: raise the fence counter to at least ARGV[1] (never
-- lowers it).
-- KEYS[1] fence counter. ARGV[1] the grant's fence.
-- Returns the counter afterwards; an error if it holds no integer.
-- @include fence.lua
-- @include wrong_kind.lua
local n = stored_number(KEYS[1])
if n == nil then
  return wrong_kind(KEYS[1], 'holds no integer')
end
local want = tonumber(ARGV[1])
if want > n then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return n
