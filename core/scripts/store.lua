-- The fenced store: one access to a data key by the holder of a fence.
-- KEYS[1] the data key, KEYS[2] its fence record (same slot).
-- ARGV[1] the operation: get, set, incrby, del or fence.
-- ARGV[2] the caller's fence (decimal, >= 1; not read by fence).
-- ARGV[3] set: the value; incrby: the increment.
-- ARGV[4] ttl in ms; '0' none (set then removes an expiry, incrby keeps it).
-- ARGV[5] how long the record outlives the data, in ms; '-1' forever.
-- Returns {0, record} when a higher fence has touched the key (refused:
-- nothing changed), else {1, result}; fence returns {1, record} (0: none).
-- @once: an increment must not be sent twice.
-- @include fence.lua
-- @include wrong_kind.lua
local last = stored_number(KEYS[2])
if last == nil then
  return wrong_kind(KEYS[2], '(the fence record) holds no number')
end
local op = ARGV[1]
if op == 'fence' then
  return {1, last}
end
local fence = tonumber(ARGV[2])
if fence < last then
  return {0, last}
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the data key holds a ' .. kind ..
                           ', not a string')
end
local result
if op == 'get' then
  result = redis.call('GET', KEYS[1])
elseif op == 'set' then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[1], ARGV[3])
  end
  result = 1
elseif op == 'incrby' then
  result = redis.pcall('INCRBY', KEYS[1], ARGV[3])
  if type(result) == 'table' and result.err then
    return result -- no integer in the key: Redis's own error, nothing changed
  end
  if ARGV[4] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
elseif op == 'del' then
  result = redis.call('DEL', KEYS[1])
else
  return redis.error_reply('ERR unknown store operation')
end
if fence > last then
  redis.call('SET', KEYS[2], ARGV[2])
end
-- The record lives as long as the data, and the linger after it.
local pttl = redis.call('PTTL', KEYS[1])
local linger = tonumber(ARGV[5])
if linger < 0 or pttl == -1 then
  redis.call('PERSIST', KEYS[2])
elseif pttl == -2 then
  redis.call('PEXPIRE', KEYS[2], linger)
else
  redis.call('PEXPIRE', KEYS[2], pttl + linger)
end
return {1, result}
