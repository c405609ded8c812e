-- Grant a free, non-empty segment of a segmented lock, trying the segments
-- from a random start, with a fencing token.
-- KEYS[1] stock hash {"<i>" -> units left, "segments" -> K},
-- KEYS[2] fence hash {"n" -> last token, "<i>" -> segment i's grant},
-- KEYS[3] wake list, KEYS[4..K+3] segment keys 0..K-1 (one hash tag).
-- ARGV[1] owner token, ARGV[2] ttl in ms, ARGV[3] start (0..K-1), ARGV[4] K,
-- ARGV[5] "woken" (optional): a waiter rung by a release takes the
-- release's wake-up here, in its attempt's round trip; none left (a waiter
-- of another process took it) and it is not its turn: it is told 0 and
-- looks again in 1 ms.
-- Returns {1, segment, fence} when granted; {0, shortest pttl of a held
-- non-empty segment (-1: none expires)} when every non-empty segment is
-- held; {2} when every segment is empty (sold out); {-1, stored K} when the
-- stock was split into another number of segments.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include wake.lua
-- @include wrong_kind.lua
local k = tonumber(ARGV[4])
local stored = redis.call('HGET', KEYS[1], 'segments')
if stored and tonumber(stored) ~= k then
  return {-1, tonumber(stored) or -1}
end
local holders = redis.call('MGET', unpack(KEYS, 4, k + 3))
for i = 1, k do
  if holders[i] == ARGV[1] then
    -- A resend of our own grant (its reply was lost): still ours.
    return {1, i - 1, tonumber(redis.call('HGET', KEYS[2], tostring(i - 1)) or '0')}
  end
end
local turn = ARGV[5] ~= 'woken' or redis.call('LPOP', KEYS[3]) ~= false
local fields = {}
for i = 1, k do fields[i] = tostring(i - 1) end
local stock = redis.call('HMGET', KEYS[1], unpack(fields))
local start = tonumber(ARGV[3]) % k
local shortest = -1
local live = 0
for j = 0, k - 1 do
  local i = (start + j) % k + 1
  local units = stock[i] and tonumber(stock[i])
  -- No stock entry: not tracked, never empty. Damaged entry: fail closed.
  if stock[i] and units == nil then
    return wrong_kind(KEYS[1], 'field ' .. fields[i] .. ' holds no count')
  end
  if not units or units > 0 then
    live = live + 1
    if not holders[i] then
      if not turn then
        return {0, 0}
      end
      -- The fence first: a damaged fence hash fails before the grant.
      local fence = next_fence(KEYS[2], 'n')
      redis.call('HSET', KEYS[2], fields[i], fence)
      redis.call('SET', KEYS[i + 3], ARGV[1], 'PX', ARGV[2])
      return {1, i - 1, fence}
    end
    local left = redis.call('PTTL', KEYS[i + 3])
    if left >= 0 and (shortest < 0 or left < shortest) then
      shortest = left
    end
  end
end
if live == 0 then
  -- Sold out: pass the wake-up on, so every waiter learns it in turn.
  wake_one(KEYS[3])
  return {2}
end
return {0, shortest}
