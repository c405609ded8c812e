-- Renew many holds in one call: the watchdog's batch on one server, or on
-- one hash slot of a cluster. Hold i takes four ARGV values: its kind (1
-- lock, 2 multi-key lock, 3 reentrant lock, 4 read hold, 5 semaphore
-- permit, 6 sequential lock, 7 Redisson read hold, 8 multi-key lock with a
-- lock delay, 9 latch or barrier party), how many KEYS are its own (taken
-- in order),
-- its owner and its ttl in ms. Each kind renews as its own script does.
-- Returns one element per hold: an integer (> 0 renewed, <= 0 not owned),
-- or the error of a hold whose renewal failed (WRONGTYPE: a key of another
-- type), which leaves the others renewed.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include renew_lock.lua
-- @include renew_multilock.lua
-- @include renew_rlock.lua
-- @include renew_rwlock_read.lua
-- @include renew_semaphore.lua
-- @include renew_seqlock.lua
-- @include renew_redisson_read.lua
-- @include renew_party.lua
local renew = {renew_lock, renew_multilock, renew_rlock, renew_rwlock_read,
               renew_semaphore, renew_seqlock, renew_redisson_read,
               renew_multilock_delay, renew_party}
local out, k = {}, 1
for a = 1, #ARGV, 4 do
  local f = renew[tonumber(ARGV[a])]
  local n = tonumber(ARGV[a + 1])
  local K = {}
  for j = 1, n do
    K[j] = KEYS[k + j - 1]
  end
  k = k + n
  local ok, r = pcall(f, K, ARGV[a + 2], ARGV[a + 3])
  if ok then
    out[#out + 1] = r
  else
    out[#out + 1] = {err = type(r) == 'table' and r.err or tostring(r)}
  end
end
return out
