-- renew_party(K, party, ms): a live party in zset K[1] (scored with the
-- server time its lease ends, in ms) has its lease end ms from now. A
-- lapsed party is neither revived nor removed: it stays as the evidence
-- that a latch or barrier is broken (a party died), for the next check.
-- Returns 1 if renewed, 0 if the party is gone or lapsed.
-- @include clock.lua
local function renew_party(K, party, ms)
  local now = server_ms()
  local ends = redis.call('ZSCORE', K[1], party)
  if not ends or tonumber(ends) <= now then
    return 0
  end
  redis.call('ZADD', K[1], 'XX', string.format('%d', now + tonumber(ms)),
             party)
  return 1
end
