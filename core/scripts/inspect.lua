-- Operator's view of one lock name, whatever its type; writes nothing.
-- KEYS: see lib/lock_keys.lua.
-- Returns {type, held 0|1, holder token ('' if none or several), fence (0:
-- none), ttl ms (-1 no expiry, -2 nothing held), hold count, readers,
-- writer 0|1, permits, permits used, permits free (-1: not applicable),
-- waiters, lock delay ms (0: no delay marker), the delay marker's pttl (-2:
-- none; the earliest a new grant may come)}; type 'unknown' and {..., key, its type} if a key of the name
-- holds a type no hilock family writes.
-- @include clock.lua
-- @include lock_keys.lua
local t, badkey, badtype = lock_key_types()
if badkey then
  return {'unknown', 0, '', 0, -2, 0, 0, 0, -1, -1, -1, 0, badkey, badtype}
end
local now = server_ms()
local ty = lock_type(t)
local held, holder, fence, ttl, count = 0, '', 0, -2, 0
local readers, writer, permits, used, free, waiters = 0, 0, -1, -1, -1, 0

local function num(v)
  return tonumber(v) or 0
end
-- Field '<owner>:op' of the reentrant and read-write locks' hashes holds
-- the owner's last call's nonce (resend.lua), not a holder.
local function is_op(f)
  return string.sub(f, -3) == ':op'
end
-- The counter every family but the semaphore and segmented lock draws from.
if t.fence then
  fence = num(redis.call('GET', K.fence))
end
-- The longest of a set of remaining times (-1, no expiry, is longest).
local function longest(a, b)
  if a == -1 or b == -1 then return -1 end
  return math.max(a, b)
end

if ty == 'lock' or ty == 'redlock' then
  local k = ty == 'lock' and K.lock or K.redlock
  holder = redis.call('GET', k)
  if holder then
    held, count = 1, 1
    ttl = redis.call('PTTL', k)
  else
    holder = '' -- only a lock delay's marker is there
  end
elseif ty == 'rlock' then
  local h = redis.call('HGETALL', K.rlock)
  for i = 1, #h, 2 do
    if not is_op(h[i]) then
      held, holder, count = 1, h[i], num(h[i + 1])
      ttl = redis.call('PTTL', K.rlock)
    end
  end
elseif ty == 'semaphore' then
  fence = 0
  local limit = tonumber(redis.call('GET', K.limit) or '')
  used = redis.call('ZCOUNT', K.permits, '(' .. now, '+inf')
  if limit then
    permits = limit
    free = math.max(0, limit - used)
  end
  if used > 0 then
    held, count = 1, used
    local top = redis.call('ZRANGE', K.permits, -1, -1, 'WITHSCORES')
    ttl = math.max(0, num(top[2]) - now)
  end
elseif ty == 'fair_lock' then
  local h = redis.call('GET', K.fair)
  if h then
    held, holder, count = 1, h, 1
    ttl = redis.call('PTTL', K.fair)
  end
  waiters = redis.call('ZCOUNT', K.fair_beats, '(' .. now, '+inf')
elseif ty == 'rwlock' then
  local w = redis.call('HGETALL', K.rw_writer)
  for i = 1, #w, 2 do
    if w[i] == 'fence' then
      fence = num(w[i + 1])
    elseif not is_op(w[i]) then
      holder, count = w[i], num(w[i + 1])
    end
  end
  if holder ~= '' then
    held, writer = 1, 1
    ttl = redis.call('PTTL', K.rw_writer)
  end
  local live = redis.call('ZRANGEBYSCORE', K.rw_readers, '(' .. now, '+inf',
                          'WITHSCORES')
  readers = #live / 2
  if readers > 0 and writer == 0 then
    held = 1
    if readers == 1 then holder = live[1] end
    ttl = math.max(0, num(live[#live]) - now)
    for i = 1, #live, 2 do
      count = count + num(redis.call('HGET', K.rw_counts, live[i]))
    end
  end
  for _, k in ipairs({K.rw_intents, K.rw_waiting, K.rw_admitted}) do
    waiters = waiters + redis.call('ZCOUNT', k, '(' .. now, '+inf')
  end
elseif ty == 'sequential_lock' then
  local h = redis.call('HMGET', K.seq_holder, 'owner', 'fence')
  local exp = h[1] and tonumber(redis.call('ZSCORE', K.seq_session, h[1]) or '')
  if exp and exp > now then
    held, holder, count = 1, h[1], 1
    fence = num(h[2])
    ttl = exp - now
  end
  waiters = redis.call('ZCOUNT', K.seq_session, '(' .. now, '+inf') - held
elseif ty == 'election' then
  -- The leader's token is the hash's one field besides 'fence'.
  local h = redis.call('HGETALL', K.elect)
  for i = 1, #h, 2 do
    if h[i] == 'fence' then
      fence = num(h[i + 1])
    else
      held, holder, count = 1, h[i], 1
    end
  end
  if held == 1 then
    ttl = redis.call('PTTL', K.elect)
  end
elseif ty == 'latch' then
  -- Held while its count is above 0 and it is not broken (no expiry); its
  -- waiters are its live registered parties.
  local h = redis.call('HMGET', K.latch, 'count', 'broken')
  count = num(h[1])
  if count > 0 and not h[2] then
    held, ttl = 1, -1
  end
  waiters = redis.call('ZCOUNT', K.latch_parties, '(' .. now, '+inf')
elseif ty == 'segmented_lock' then
  local idx, total = seg_indices(t)
  fence = num(redis.call('HGET', K.seg_fence, 'n'))
  used = 0
  for _, i in ipairs(idx) do
    local left = redis.call('PTTL', SEG_PREFIX .. i)
    if left ~= -2 then
      used = used + 1
      ttl = used == 1 and left or longest(ttl, left)
    end
  end
  permits, free = total, math.max(0, total - used)
  if used > 0 then
    held, count = 1, used
  end
end
if held == 0 then ttl = -2 end
-- A lock delay's marker: its value is the delay, its pttl how long no new
-- grant may come (while held: if the holder were lost now).
local delay, delay_left = 0, -2
if t.delay then
  delay = num(redis.call('GET', K.delay))
  delay_left = redis.call('PTTL', K.delay)
end
return {ty, held, holder, fence, ttl, count, readers, writer, permits, used,
        free, waiters, delay, delay_left}
