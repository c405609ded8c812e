-- The sequential lock (ZooKeeper's lock recipe): every operation in one
-- script, so the rules for entries, sessions and watches live in one place.
--
-- KEYS[1] queue    zset: contender id -> sequence number (lowest first)
-- KEYS[2] session  zset: contender id -> session expiry (server ms)
-- KEYS[3] holder   hash: owner, fence, seq of the current grant
-- KEYS[4] counter  sequence counter (INCR), never reset
-- KEYS[5] fence    fencing counter (shared with the other lock families)
-- KEYS[6] the prefix of the contenders' wake lists; a contender's list is
--         the prefix followed by its sequence number in 20 digits (same
--         hash tag, so the same slot)
-- KEYS[7] the lock-delay marker (optional): every grant checks it, whatever
--         its own delay
-- ARGV[1] op: 'acquire' (enqueue or re-check), 'try' (take it only if no
--         live contender exists), 'release', 'leave' (a waiter gives up),
--         'extend', 'owned', 'info'
-- ARGV[2] contender id, which is the owner token of a grant
-- ARGV[3] ttl ms (the holder's session), ARGV[4] session window ms of a
--         waiter, ARGV[5] extend: ms, ARGV[6] extend: 'add' or 'set',
--         ARGV[7] lock delay ms (optional, > 0): a grant sets the marker to
--         ttl + the delay and an extension pushes it along; the holder's
--         release (or leave) deletes it. No grant comes while a marker lives
--         without a holder: the head of the line is busy for its pttl
--
-- Replies: acquire/try {1, fence, seq} granted, or {0, ms left on the
-- predecessor's session (on the lock delay's marker when none is ahead),
-- seq, live entries ahead (-1: not enqueued)};
-- release {1} released / {0} not the holder; leave {1 if it released a
-- grant, else 0}; extend {new session ms} / {0}; owned {0|1};
-- info {locked 0|1, waiters, holder's seq or 0}.
--
-- Liveness is judged on server time only. An entry is live while its
-- session expiry lies in the future; every call first purges the dead.
-- Whatever removes an entry fires its watch: one push to the wake list of
-- the next live entry, the only contender that was watching it.
-- @include fence.lua
-- @include wake.lua
-- @include clock.lua
-- @include delay.lua
local queue, session, holder, counter, fence_key, wake_prefix =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local op, me = ARGV[1], ARGV[2]
local marker, delay = KEYS[7], tonumber(ARGV[7])

-- The wake list of the entry with sequence s.
local function wake_key(s)
  return wake_prefix .. string.format('%020d', tonumber(s))
end

local now = server_ms()

-- The holder's grant ends with its release: the name is free at once.
local function end_delay()
  if marker then
    redis.call('DEL', marker)
  end
end

-- The session expiry of a live entry, or nil.
local function expiry(id)
  local e = redis.call('ZSCORE', session, id)
  if e and tonumber(e) > now then
    return tonumber(e)
  end
  return nil
end

-- Remove one entry, its wake list and, if it holds, the grant. Returns its
-- sequence number (nil if it had none).
local function drop(id)
  local s = redis.call('ZSCORE', queue, id)
  redis.call('ZREM', queue, id)
  redis.call('ZREM', session, id)
  if s then
    redis.call('DEL', wake_key(s))
  end
  if redis.call('HGET', holder, 'owner') == id then
    redis.call('DEL', holder)
  end
  return s
end

-- The nearest live entry in one direction from a score bound; entries
-- without a live session (damage) are dropped on the way. Returns id, seq.
local function nearest(from, to, rev)
  local cmd = rev and 'ZREVRANGEBYSCORE' or 'ZRANGEBYSCORE'
  while true do
    local r = redis.call(cmd, queue, from, to, 'WITHSCORES', 'LIMIT', 0, 1)
    if #r == 0 then
      return nil
    end
    if expiry(r[1]) then
      return r[1], r[2]
    end
    drop(r[1])
  end
end

-- Fire the watch on the entry with sequence s, which is gone: one element
-- in the successor's own list, and in nobody else's.
local function notify_after(s)
  local id, ns = nearest('(' .. s, '+inf', false)
  if id == nil then
    return
  end
  wake_up(wake_key(ns), 1, math.max(1, expiry(id) - now + 1000))
end

-- Drop every entry whose session has expired (and a grant whose entry is
-- gone), then fire their watches.
local function purge()
  local dead = redis.call('ZRANGEBYSCORE', session, '-inf', now)
  local owner = redis.call('HGET', holder, 'owner')
  if owner and not expiry(owner) then
    dead[#dead + 1] = owner
  end
  local gone = {}
  for _, id in ipairs(dead) do
    local s = drop(id)
    if s then
      gone[#gone + 1] = s
    end
  end
  for _, s in ipairs(gone) do
    notify_after(s)
  end
end

-- The keys live as long as the latest session, so a lock whose contenders
-- all died lapses even if nobody calls again.
local function settle()
  live_with(session, now, {queue, session, holder})
end

local function grant(s)
  local cur = redis.call('HMGET', holder, 'owner', 'fence')
  if cur[1] == me then
    -- A resend of our own grant (reply lost to a broken connection).
    return {1, tonumber(cur[2]), s}
  end
  -- The fence first: a damaged counter fails before the grant is written.
  local fence = next_fence(fence_key)
  redis.call('DEL', holder)
  redis.call('HSET', holder, 'owner', me, 'fence', fence, 'seq', s)
  redis.call('ZADD', session, now + tonumber(ARGV[3]), me)
  set_delay(marker, ARGV[7], ARGV[3])
  redis.call('DEL', wake_key(s))
  settle()
  return {1, fence, s}
end

local function holds()
  return redis.call('HGET', holder, 'owner') == me and expiry(me) ~= nil
end

if op == 'info' then
  purge()
  settle()
  local h = redis.call('HMGET', holder, 'owner', 'seq')
  local locked = h[1] and 1 or 0
  return {locked, redis.call('ZCARD', session) - locked, tonumber(h[2] or '0')}
end

if op == 'owned' then
  purge()
  settle()
  return {holds() and 1 or 0}
end

if op == 'release' then
  purge()
  if not holds() then
    settle()
    return {0}
  end
  local s = drop(me)
  end_delay()
  if s then
    notify_after(s)
  end
  settle()
  return {1}
end

if op == 'leave' then
  local released = holds() and 1 or 0
  local s = drop(me)
  if released == 1 then
    -- A grant whose reply never reached the contender, given back.
    end_delay()
  end
  purge()
  if s then
    notify_after(s)
  end
  settle()
  return {released}
end

if op == 'extend' then
  purge()
  if not holds() then
    settle()
    return {0}
  end
  local ms = tonumber(ARGV[5])
  if ARGV[6] == 'add' then
    ms = ms + (expiry(me) - now)
  end
  redis.call('ZADD', session, 'XX', now + ms, me)
  local d = delay and tonumber(redis.call('GET', marker))
  if d then
    redis.call('PEXPIRE', marker, ms + d)
  end
  settle()
  return {ms}
end

if op ~= 'acquire' and op ~= 'try' then
  return redis.error_reply('ERR seqlock: unknown op')
end

purge()
local s = redis.call('ZSCORE', queue, me)
if s then
  s = tonumber(s)
else
  if op == 'try' then
    local first = nearest('-inf', '+inf', false)
    if first then
      settle()
      return {0, expiry(first) - now, 0, -1}
    end
    local wait = delay_left(marker)
    if wait > 0 then
      settle()
      return {0, wait, 0, -1}
    end
  end
  -- A new entry, or a waiter whose session lapsed while it stalled: the
  -- next sequence number, at the tail.
  s = redis.call('INCR', counter)
  local top = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  if #top > 0 and tonumber(top[2]) >= s then
    -- The counter was lost (a restarted server): a new entry must never
    -- take a number at or below a live one.
    s = tonumber(top[2]) + 1
    redis.call('SET', counter, s)
  end
  redis.call('ZADD', queue, s, me)
  redis.call('ZADD', session, now + tonumber(ARGV[4]), me)
end

local pred = nearest('(' .. s, '-inf', true)
-- The head of the line: granted, unless a grant ended without its holder's
-- release and its lock delay still runs (then it waits the marker's pttl,
-- keeping its place). A resend of our own grant is recognised in grant().
local wait = 0
if pred == nil then
  if redis.call('HGET', holder, 'owner') ~= me then
    wait = delay_left(marker)
  end
  if wait == 0 then
    return grant(s)
  end
else
  wait = expiry(pred) - now
end
if op == 'try' then
  local gone = drop(me)
  if gone then
    notify_after(gone)
  end
  settle()
  return {0, wait, 0, -1}
end
-- A re-check is the waiter's heartbeat.
redis.call('ZADD', session, now + tonumber(ARGV[4]), me)
settle()
return {0, wait, s, redis.call('ZRANK', queue, me)}
