-- Operator: set a semaphore's limit. Holders keep their permits (a lower
-- limit takes effect as they leave); a higher one wakes as many waiters as
-- there are free permits (up to 1024 at once).
-- KEYS[1] permits zset, KEYS[2] limit, KEYS[3] permit wake list.
-- ARGV[1] the new limit (>= 0).
-- Returns {limit, live permits}.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include wake.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('SET', KEYS[2], ARGV[1])
local limit = tonumber(ARGV[1])
local used = redis.call('ZCARD', KEYS[1])

-- At most one wake-up per free permit: top up by what was freed, trim what
-- no free permit backs (the list is this semaphore's own).
local function wake(nfreed, free)
  local n = redis.call('LLEN', KEYS[3])
  if n > free then
    if free > 0 then
      redis.call('LTRIM', KEYS[3], 0, free - 1)
    else
      redis.call('DEL', KEYS[3])
    end
    return
  end
  local add = math.min(nfreed, free - n, 1024)
  if add > 0 then
    local ones = {}
    for i = 1, add do ones[i] = '1' end
    redis.call('RPUSH', KEYS[3], unpack(ones))
    redis.call('PEXPIRE', KEYS[3], 5000)
    ring(KEYS[3])
  end
end

wake(limit - used, limit - used)
return {limit, used}
