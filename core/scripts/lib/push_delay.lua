-- push_delay(marker, ms): a lock delay's marker (its value is the delay in
-- ms), if it is there, lives ms (its hold's new TTL) plus the delay. A hold
-- that has a marker was granted with it, so the marker is the hold's own.
local function push_delay(marker, ms)
  local delay = tonumber(redis.call('GET', marker))
  if delay then
    redis.call('PEXPIRE', marker, tonumber(ms) + delay)
  end
end
