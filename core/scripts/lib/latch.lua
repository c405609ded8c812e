-- latch_open(K, count, now): a countdown latch, hash K[1] {count = n,
-- broken = reason}, made with count when it does not exist; while its count
-- is above 0, a registered party in zset K[2] (scored with the server time
-- its lease ends, in ms) whose lease ended by now breaks it, and its
-- waiters are told (a message on the channel named as the hash). Returns
-- the count left and the reason it is broken (nil while it is not).
-- @include clock.lua
local function latch_open(K, count, now)
  local n = redis.call('HGET', K[1], 'count')
  if not n then
    redis.call('HSET', K[1], 'count', count)
    n = count
  end
  local left = tonumber(n)
  if not left or left < 0 or left ~= math.floor(left) then
    error('WRONGTYPE Operation against a key holding the wrong kind of ' ..
          'value: ' .. K[1] .. ' field count holds no count', 0)
  end
  local broken = redis.call('HGET', K[1], 'broken')
  if broken or left == 0 then
    return left, broken or nil
  end
  local lapsed = redis.call('ZRANGEBYSCORE', K[2], '-inf',
                            string.format('%d', now), 'LIMIT', 0, 1)
  if #lapsed > 0 then
    broken = 'a registered party\'s lease ended before it counted down ' ..
             '(it died, hung or was cut off)'
    redis.call('HSET', K[1], 'broken', broken)
    redis.pcall('PUBLISH', K[1], 'broken')
    return left, broken
  end
  return left, nil
end
