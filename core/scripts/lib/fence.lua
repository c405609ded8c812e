-- next_fence(key[, field]): the next fencing token kept in counter `key`
-- (or in field `field` of hash `key`): the larger of one more than the last
-- and the server's clock in microseconds, stored back. The clock term is
-- what keeps a token from going back when the counter lost its last
-- increments: a missing counter (a new name, or one lost to FLUSHALL, a
-- restart without persistence or an eviction), or a replica promoted before
-- the counter's last increments reached it. It holds as long as the clock
-- of the server that draws is not behind the clock that drew the lost
-- tokens by more than the time between the two draws (a failover takes
-- seconds), and fewer than one token per microsecond was handed out on the
-- name. INCRBY/HINCRBY by 0 reads the counter and fails, as INCR did, on
-- one that holds no integer.
local function next_fence(key, field)
  local last
  if field then
    last = redis.call('HINCRBY', key, field, 0)
  else
    last = redis.call('INCRBY', key, 0)
  end
  local t = redis.call('TIME')
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if f <= last then
    f = last + 1
  end
  if field then
    redis.call('HSET', key, field, string.format('%d', f))
  else
    redis.call('SET', key, string.format('%d', f))
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
