-- renew_seqlock(K, owner, ms): a sequential lock holder's session (K[1]
-- session zset, K[2] queue, K[3] holder hash) lasts ms more while owner
-- holds the grant; an expired session is never revived. The queue's and
-- holder's expiry is kept at least as long as the session's, so the
-- entry's place and grant never lapse before it. K[4] (optional): the
-- lock-delay marker, whose value is the delay in ms; its TTL is set to ms
-- plus the delay. Returns 1 renewed, 0 not owned.
-- @include clock.lua
-- @include delay.lua
local function renew_seqlock(K, owner, ms)
  local now = server_ms()
  local e = redis.call('ZSCORE', K[1], owner)
  if not e or tonumber(e) <= now then
    return 0
  end
  if redis.call('HGET', K[3], 'owner') ~= owner then
    return 0
  end
  local ttl = tonumber(ms)
  redis.call('ZADD', K[1], 'XX', now + ttl, owner)
  if K[4] then
    push_delay(K[4], ttl)
  end
  local keep = ttl + 1000
  for i = 1, 3 do
    local left = redis.call('PTTL', K[i])
    if left >= 0 and left < keep then
      redis.call('PEXPIRE', K[i], keep)
    end
  end
  return 1
end
