-- server_ms(): the server's clock in ms, the only clock expiries are
-- judged on.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
