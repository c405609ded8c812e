-- The keys of one lock name, for the operator's scripts (inspect.lua,
-- force_release.lua), which do not know the lock's type in advance.
-- KEYS (all hilock:{name}:<role>, one hash tag, so one cluster slot), in
-- the order of LOCK_ROLES below, then three prefixes: 'seg:' (segment i's
-- key is the prefix and i), 'wake:' (a fair lock waiter's wake list is the
-- prefix and its id) and 'seq:wake:' (a sequential lock entry's wake list
-- is the prefix and its sequence number in 20 digits).
local LOCK_ROLES = {
  {'lock', 'string'}, {'fence', 'string'}, {'wake', 'list'},
  {'redlock', 'string'}, {'rlock', 'hash'},
  {'permits', 'zset'}, {'limit', 'string'}, {'pwake', 'list'},
  {'fair', 'string'}, {'fair_queue', 'zset'}, {'fair_beats', 'zset'},
  {'fair_ticket', 'string'},
  {'rw_writer', 'hash'}, {'rw_readers', 'zset'}, {'rw_counts', 'hash'},
  {'rw_intents', 'zset'}, {'rw_waiting', 'zset'}, {'rw_admitted', 'zset'},
  {'rw_rwake', 'list'}, {'rw_wwake', 'list'},
  {'seq_queue', 'zset'}, {'seq_session', 'zset'}, {'seq_holder', 'hash'},
  {'seq_counter', 'string'},
  {'seg_stock', 'hash'}, {'seg_fence', 'hash'}, {'seg_wake', 'list'},
  {'delay', 'string'}, {'elect', 'hash'}, {'ewake', 'list'},
  {'latch', 'hash'}, {'latch_parties', 'zset'}}
local K = {}
for i, r in ipairs(LOCK_ROLES) do K[r[1]] = KEYS[i] end
local SEG_PREFIX = KEYS[#LOCK_ROLES + 1]
local FAIR_WAKE_PREFIX = KEYS[#LOCK_ROLES + 2]
local SEQ_WAKE_PREFIX = KEYS[#LOCK_ROLES + 3]

-- The segment indices a segmented lock of this name may have granted: the
-- stored segment count, and every index of its stock and fence hashes.
-- Returns the sorted indices and the segment count they imply.
local function seg_indices(t)
  local seen, out, total = {}, {}, 0
  local function add(f)
    local i = tonumber(f)
    if i and i >= 0 and i < 1024 and i % 1 == 0 and not seen[i] then
      seen[i] = true
      out[#out + 1] = i
      if i + 1 > total then total = i + 1 end
    end
  end
  if t.seg_stock then
    local k = tonumber(redis.call('HGET', K.seg_stock, 'segments'))
    if k and k > 0 and k <= 1024 then
      for i = 0, k - 1 do add(i) end
    end
    for _, f in ipairs(redis.call('HKEYS', K.seg_stock)) do add(f) end
  end
  if t.seg_fence then
    for _, f in ipairs(redis.call('HKEYS', K.seg_fence)) do add(f) end
  end
  table.sort(out)
  return out, total
end

-- The type of every key present ({role -> type}), and the key of the first
-- key holding a type its family never writes and that type (nil if none).
local function lock_key_types()
  local t = {}
  for _, r in ipairs(LOCK_ROLES) do
    local ty = redis.call('TYPE', K[r[1]])['ok']
    if ty ~= 'none' then
      if ty ~= r[2] then
        return t, K[r[1]], ty
      end
      t[r[1]] = ty
    end
  end
  -- A segment key holds a holder's token.
  if t.seg_stock or t.seg_fence then
    for _, i in ipairs(seg_indices(t)) do
      local ty = redis.call('TYPE', SEG_PREFIX .. i)['ok']
      if ty ~= 'none' and ty ~= 'string' then
        return t, SEG_PREFIX .. i, ty
      end
    end
  end
  return t, nil
end

-- The lock type present under the name ('none' if no family's state is
-- there; fence counters and wake lists alone are no lock). A name used by
-- several types at once reports the first in this order.
local function lock_type(t)
  if t.lock then return 'lock' end
  if t.redlock then return 'redlock' end
  if t.rlock then return 'rlock' end
  if t.permits or t.limit then return 'semaphore' end
  if t.fair or t.fair_queue or t.fair_beats then return 'fair_lock' end
  if t.rw_writer or t.rw_readers or t.rw_counts or t.rw_intents or
      t.rw_waiting or t.rw_admitted then
    return 'rwlock'
  end
  if t.seq_queue or t.seq_session or t.seq_holder then
    return 'sequential_lock'
  end
  if t.seg_stock then return 'segmented_lock' end
  if t.seg_fence then
    for _, i in ipairs(seg_indices(t)) do
      if redis.call('EXISTS', SEG_PREFIX .. i) == 1 then
        return 'segmented_lock'
      end
    end
  end
  if t.elect then return 'election' end
  if t.latch or t.latch_parties then return 'latch' end
  -- A lock's delay marker alone: a lost grant's lock delay still runs.
  if t.delay then return 'lock' end
  return 'none'
end
