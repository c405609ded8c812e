-- next_fence(key[, field]): the next fencing token kept in counter `key`
-- (or in field `field` of hash `key`): one more than the last. A missing
-- counter (a new name, or one lost to FLUSHALL, a restart without
-- persistence or an eviction) starts at the server's clock in microseconds,
-- so a token never goes back as long as that clock does not step back and
-- fewer than one token per microsecond was handed out on the name.
local function next_fence(key, field)
  local f
  if field then
    f = redis.call('HINCRBY', key, field, 1)
  else
    f = redis.call('INCR', key)
  end
  if f == 1 then
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if field then
      redis.call('HSET', key, field, string.format('%d', f))
    else
      redis.call('SET', key, string.format('%d', f))
    end
  end
  return f
end
-- stored_number(key): the number a fence counter or record `key` holds (0
-- if none), or nil if it holds something else (another type included).
local function stored_number(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    if string.find(v['err'] or '', '^WRONGTYPE') then
      return nil
    end
    return error(v, 0)  -- not the key's type (an ACL refusal): as is
  end
  if not v then
    return 0
  end
  return tonumber(v)
end
