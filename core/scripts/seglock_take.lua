-- Take units from the held segment's stock, only while the caller's token
-- holds the segment. Never resent: a lost reply may mean units were taken.
-- @once
-- KEYS[1] segment key, KEYS[2] stock hash (same hash tag).
-- ARGV[1] owner token, ARGV[2] segment index, ARGV[3] n >= 1,
-- ARGV[4] '1': take what is left when fewer than n remain; 'back': put n
-- units back instead (a take the replicas did not confirm, wait_replicas).
-- Returns {1, taken, left}; {-1} if the caller does not hold the segment;
-- {-2} if the segment has no stock entry.
-- @include wrong_kind.lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1}
end
local raw = redis.call('HGET', KEYS[2], ARGV[2])
if not raw then
  return {-2}
end
local units = tonumber(raw)
if units == nil then
  return wrong_kind(KEYS[2], 'field ' .. ARGV[2] .. ' holds no count')
end
local n = tonumber(ARGV[3])
if ARGV[4] == 'back' then
  return {1, 0, redis.call('HINCRBY', KEYS[2], ARGV[2], n)}
end
if units < n then
  if ARGV[4] ~= '1' then
    return {1, 0, units}
  end
  n = math.max(units, 0)
end
if n == 0 then
  return {1, 0, units}
end
return {1, n, redis.call('HINCRBY', KEYS[2], ARGV[2], -n)}
