-- Operator's forced release of one lock name, whatever its type: every key
-- of the lock's state goes, and its waiters are woken as its release wakes
-- them, so they try again at once. What counts up stays, so that numbers
-- never go back: the fence counters, the fair lock's ticket and the
-- sequential lock's sequence counter; so do the data a lock guards and its
-- settings: a semaphore's stored limit, a segmented lock's stock.
-- KEYS: see lib/lock_keys.lua.
-- Returns {1 removed | 0 nothing there, type}, or {-1, key, its type} if a
-- key of the name holds a type no hilock family writes (nothing changes).
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include sem_wake.lua
-- @include lock_keys.lua
local t, badkey, badtype = lock_key_types()
if badkey then
  return {-1, badkey, badtype}
end
local ty = lock_type(t)

-- At least n wake-ups (at most 1024) in a wake list, rung; none for none.
local function wake(list, n)
  if n > 0 then
    wake_n(list, math.min(n, 1024))
  end
end

local removed = 0
if ty == 'lock' then
  -- A lock delay's marker goes too: the operator frees the name at once.
  removed = math.min(1, redis.call('DEL', K.lock, K.delay))
  wake(K.wake, 1)
elseif ty == 'election' then
  -- The lead goes: a standby is woken, observers hear of it.
  removed = redis.call('DEL', K.elect)
  wake(K.ewake, 1)
  redis.pcall('PUBLISH', K.elect, 'resign')
elseif ty == 'latch' then
  -- As hilock_latch_delete: its waiters hear of it and look again.
  removed = math.min(1, redis.call('DEL', K.latch, K.latch_parties))
  redis.pcall('PUBLISH', K.latch, 'deleted')
elseif ty == 'redlock' then
  removed = redis.call('DEL', K.redlock)
elseif ty == 'rlock' then
  removed = math.min(1, redis.call('DEL', K.rlock, K.delay))
  wake(K.wake, 1)
elseif ty == 'semaphore' then
  local n = redis.call('ZCARD', K.permits)
  if n > 0 then
    redis.call('DEL', K.permits)
    removed = 1
    local limit = tonumber(redis.call('GET', K.limit) or '') or 0
    sem_wake(K.pwake, n, limit)
  end
elseif ty == 'fair_lock' then
  -- Every waiter in line tries again and queues anew with its ticket.
  local ids = redis.call('ZRANGE', K.fair_queue, 0, -1)
  removed = math.min(1, redis.call('DEL', K.fair, K.fair_queue, K.fair_beats,
                                   K.delay))
  for _, id in ipairs(ids) do
    wake(FAIR_WAKE_PREFIX .. id, 1)
  end
elseif ty == 'rwlock' then
  local nr = redis.call('ZCARD', K.rw_waiting) +
             redis.call('ZCARD', K.rw_admitted)
  local nw = redis.call('ZCARD', K.rw_intents)
  removed = math.min(1, redis.call('DEL', K.rw_writer, K.rw_readers,
                                   K.rw_counts, K.rw_intents, K.rw_waiting,
                                   K.rw_admitted, K.delay))
  wake(K.rw_rwake, nr)
  wake(K.rw_wwake, nw)
elseif ty == 'sequential_lock' then
  -- Every entry's watch fires: each contender enqueues anew (a lock
  -- delay's marker goes too).
  local e = redis.call('ZRANGE', K.seq_queue, 0, -1, 'WITHSCORES')
  removed = math.min(1, redis.call('DEL', K.seq_queue, K.seq_session,
                                   K.seq_holder, K.delay))
  for i = 2, #e, 2 do
    wake(SEQ_WAKE_PREFIX .. string.format('%020d', tonumber(e[i])), 1)
  end
elseif ty == 'segmented_lock' then
  local idx = seg_indices(t)
  local n = 0
  for _, i in ipairs(idx) do
    n = n + redis.call('DEL', SEG_PREFIX .. i)
  end
  removed = math.min(1, n)
  wake(K.seg_wake, n)
end
return {removed, ty}
