-- sem_wake(list, nfreed, free): at most one wake-up per free permit of a
-- semaphore: top the wake list up by what was freed, trim what no free
-- permit backs (the list is this semaphore's own), and ring it.
-- @include wake.lua
local function sem_wake(list, nfreed, free)
  local n = redis.call('LLEN', list)
  if n > free then
    if free > 0 then
      redis.call('LTRIM', list, 0, free - 1)
    else
      redis.call('DEL', list)
    end
    return
  end
  local add = math.min(nfreed, free - n, 1024)
  if add > 0 then
    local ones = {}
    for i = 1, add do ones[i] = '1' end
    redis.call('RPUSH', list, unpack(ones))
    redis.call('PEXPIRE', list, 5000)
    ring(list)
  end
end
