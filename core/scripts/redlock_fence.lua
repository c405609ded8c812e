-- Redlock, one node: raise the fence counter to at least ARGV[1] (never
-- lowers it).
-- KEYS[1] fence counter. ARGV[1] the grant's fence.
-- Returns the counter afterwards; an error if it holds no integer.
-- @include fence.lua
local n = stored_number(KEYS[1])
if n == nil then
  return redis.error_reply('WRONGTYPE Operation against a key holding ' ..
                           'the wrong kind of value: ' .. KEYS[1] ..
                           ' holds no integer')
end
local want = tonumber(ARGV[1])
if want > n then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return n
