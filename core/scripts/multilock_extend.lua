-- Extend a multi-key lock, and the watchdog's renewal of it: reset
-- (ARGV[3] 'set' or absent) or add to (ARGV[3] == 'add') the TTL of every
-- key, only if the caller's token holds every one; else change nothing.
-- KEYS[1..n] lock keys. ARGV[1] owner token, ARGV[2] ms.
-- Returns the smallest new TTL in ms, or -i if key i is not held.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local n = #KEYS
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    return -i
  end
end
local least = nil
for i = 1, n do
  local ms = tonumber(ARGV[2])
  if ARGV[3] == 'add' then
    local left = redis.call('PTTL', KEYS[i])
    if left > 0 then
      ms = ms + left
    end
  end
  redis.call('PEXPIRE', KEYS[i], ms)
  if least == nil or ms < least then
    least = ms
  end
end
return least
