-- server_ms(): the server's clock in ms, the only clock expiries are
-- judged on.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- live_with(zset, now, keys): the keys (zset among them) live as long as
-- the latest deadline (ms of server time) in zset, and a second more; with
-- zset empty they are deleted.
local function live_with(zset, now, keys)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', unpack(keys))
    return
  end
  local ms = math.max(1, tonumber(last[2]) - now + 1000)
  for _, k in ipairs(keys) do
    redis.call('PEXPIRE', k, ms)
  end
end
