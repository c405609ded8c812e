-- Load a segmented lock's stock: split a total evenly ('split'), or set one
-- segment ('set'). Records the segment count and wakes one waiter.
-- KEYS[1] stock hash, KEYS[2] wake list (same hash tag).
-- ARGV[1] K, ARGV[2] 'split' or 'set', ARGV[3] total or units,
-- ARGV[4] segment index (for 'set').
-- Returns {1, total units now}, or {-1, stored K} when the stock was split
-- into another number of segments ('set' only; 'split' replaces it).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local k = tonumber(ARGV[1])
if ARGV[2] == 'split' then
  local total = tonumber(ARGV[3])
  local per = math.floor(total / k)
  local extra = total - per * k
  redis.call('DEL', KEYS[1])
  local args = {'segments', k}
  for i = 0, k - 1 do
    args[#args + 1] = tostring(i)
    args[#args + 1] = string.format('%d', per + ((i < extra) and 1 or 0))
  end
  redis.call('HSET', KEYS[1], unpack(args))
else
  local stored = redis.call('HGET', KEYS[1], 'segments')
  if stored and tonumber(stored) ~= k then
    return {-1, tonumber(stored) or -1}
  end
  redis.call('HSET', KEYS[1], 'segments', k, ARGV[4], ARGV[3])
end
wake_one(KEYS[2])
local total = 0
for i = 0, k - 1 do
  total = total + (tonumber(redis.call('HGET', KEYS[1], tostring(i))) or 0)
end
return {1, total}
