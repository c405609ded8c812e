-- renew_semaphore(K, permit, ms): a live permit in zset K[1] expires ms
-- from now on the server's clock; an expired permit is never revived.
-- Returns 1 if renewed, 0 if the permit is not live.
-- @include clock.lua
local function renew_semaphore(K, permit, ms)
  local now = server_ms()
  redis.call('ZREMRANGEBYSCORE', K[1], '-inf', now)
  if not redis.call('ZSCORE', K[1], permit) then
    return 0
  end
  redis.call('ZADD', K[1], 'XX', string.format('%d', now + tonumber(ms)),
             permit)
  local top = redis.call('ZRANGE', K[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', K[1], string.format('%d', tonumber(top[2]) - now))
  return 1
end
