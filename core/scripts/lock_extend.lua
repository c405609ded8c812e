-- Reset (ARGV[3] 'set' or absent: renewal) or add to (ARGV[3] == 'add') the
-- lock's TTL, only while the caller's token holds it. An expired key stays
-- expired.
-- KEYS[1] lock key. ARGV[1] owner token, ARGV[2] ms.
-- Returns the new TTL in ms, or 0 if not owned.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ms = tonumber(ARGV[2])
if ARGV[3] == 'add' then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    ms = ms + left
  end
end
redis.call('PEXPIRE', KEYS[1], ms)
return ms
