-- The fair (FIFO) lock: every queue operation in one script, so the queue
-- rules live in one place.
--
-- KEYS[1] holder    string: owner token of the holder, PX = ttl
-- KEYS[2] fence     fencing counter (shared with the other lock families)
-- KEYS[3] queue     zset: waiter id -> ticket (FIFO order, lowest first)
-- KEYS[4] heartbeat zset: waiter id -> heartbeat deadline (server ms)
-- KEYS[5] tickets   ticket counter: request order, never reset
-- KEYS[6] the prefix of the waiters' wake lists; a waiter's list is the
--         prefix followed by its id (same hash tag, so the same slot)
-- KEYS[7] the caller's own wake list (KEYS[6] followed by ARGV[2]): no key
--         is built from ARGV here
-- KEYS[8] the lock-delay marker (optional): every grant checks it, whatever
--         its own delay
-- ARGV[1] op: 'acquire' (grant, or queue and heartbeat), 'try' (grant only
--         if nobody waits), 'release', 'leave' (a waiter gives up), 'count'
-- ARGV[2] waiter id, which becomes the owner token on a grant
-- ARGV[3] ttl ms, ARGV[4] heartbeat window ms, ARGV[5] the waiter's ticket
--         from an earlier call (0: none yet), ARGV[6] lock delay ms
--         (optional, > 0): a grant sets the marker to ttl + the delay, a
--         release deletes it; no grant comes while a marker lives without
--         a holder (busy answers its pttl)
--
-- Replies: acquire/try {1, fence, ticket} granted, or {0, holder's pttl
-- (0 if free), ticket, position (0 = head, -1 = not queued)};
-- release {1} released / {0} not the holder; leave {1 if it released a
-- grant, else 0}; count {live waiters}.
--
-- Liveness is judged on server time only: a waiter's heartbeat deadline is
-- TIME + window, refreshed by each of its calls; a deadline in the past
-- means the waiter is dead and it is dropped. Nothing rescores other
-- waiters, so a live waiter keeps its place however long it waits.
-- @include fence.lua
-- @include wake.lua
-- @include clock.lua
-- @include delay.lua
local holder, fence_key, queue, beats, tickets, wake_prefix, my_wake =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local op, me = ARGV[1], ARGV[2]
local marker, delay = KEYS[8], tonumber(ARGV[6])

local now = server_ms()

-- Remove a waiter and its wake list (the caller's is KEYS[7]; another's
-- is named by its id as the queue holds it).
local function drop(member, list)
  redis.call('ZREM', queue, member)
  redis.call('ZREM', beats, member)
  redis.call('DEL', list)
end

-- Skip the dead: every waiter whose deadline has passed.
local function purge()
  local dead = redis.call('ZRANGEBYSCORE', beats, '-inf', now)
  for _, id in ipairs(dead) do
    drop(id, wake_prefix .. id)
  end
end

-- The first live waiter in ticket order (an entry without a heartbeat is
-- damage and is dropped), or nil.
local function head()
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if first == nil then
      return nil
    end
    if redis.call('ZSCORE', beats, first) then
      return first
    end
    drop(first, wake_prefix .. first)
  end
end

-- The queue keys live as long as the latest heartbeat deadline, so a queue
-- whose waiters all died lapses even if nobody calls again.
local function settle()
  live_with(beats, now, {queue, beats})
end

-- If the lock is free, wake the head and nobody else: one element in its
-- own list, kept while its heartbeat could still be live. released: the
-- holder's release just freed it (no other grant's delay marker can be
-- there: this grant came after any such marker ended).
local function wake_head(released)
  if not released and (redis.call('EXISTS', holder) == 1 or
                       delay_left(marker) > 0) then
    return
  end
  local h = head()
  if h == nil or h == me then
    return
  end
  local deadline = tonumber(redis.call('ZSCORE', beats, h))
  wake_up(wake_prefix .. h, 1, math.max(1, deadline - now + 1000))
end

local function grant(ticket)
  -- The fence first: a damaged counter fails before the holder is written.
  local fence = next_fence(fence_key)
  redis.call('SET', holder, me, 'PX', ARGV[3])
  set_delay(marker, ARGV[6], ARGV[3])
  drop(me, my_wake)
  settle()
  return {1, fence, ticket}
end

local function busy(ticket, pos)
  settle()
  wake_head()
  local pttl = delay_left(marker)
  if redis.call('EXISTS', holder) == 1 then
    pttl = redis.call('PTTL', holder)
  end
  return {0, pttl, ticket, pos}
end

if op == 'count' then
  return {redis.call('ZCOUNT', beats, '(' .. now, '+inf')}
end

if op == 'release' then
  if redis.call('GET', holder) ~= me then
    return {0}
  end
  redis.call('DEL', holder)
  if delay then
    redis.call('DEL', marker)
  end
  purge()
  settle()
  wake_head(true)
  return {1}
end

if op == 'leave' then
  -- A grant whose reply never reached the waiter is given back too.
  local released = 0
  if redis.call('GET', holder) == me then
    redis.call('DEL', holder)
    if delay then
      redis.call('DEL', marker)
    end
    released = 1
  end
  drop(me, my_wake)
  purge()
  settle()
  wake_head()
  return {released}
end

local ticket = tonumber(ARGV[5])
purge()
local cur = redis.call('GET', holder)
if cur == me then
  -- A resend of our own grant (reply lost to a broken connection): it was
  -- the last grant, so the counter is its fence.
  return {1, tonumber(redis.call('GET', fence_key) or '0'), ticket}
end

if op == 'try' then
  if cur == false and head() == nil and delay_left(marker) == 0 then
    return grant(redis.call('INCR', tickets))
  end
  return busy(0, -1)
end

if op ~= 'acquire' then
  return redis.error_reply('ERR fair lock: unknown op')
end

local queued = redis.call('ZSCORE', queue, me)
if queued then
  ticket = tonumber(queued)
else
  -- A first call draws a ticket at the tail. A waiter that comes back with
  -- its ticket (dropped while it stalled past its window) keeps its place.
  if ticket <= 0 then
    ticket = redis.call('INCR', tickets)
  elseif ticket > tonumber(redis.call('GET', tickets) or '0') then
    -- The counter was lost (a restarted server): newcomers must not draw
    -- tickets ahead of a waiter that was already queued.
    redis.call('SET', tickets, ticket)
  end
  redis.call('ZADD', queue, ticket, me)
end
redis.call('ZADD', beats, now + tonumber(ARGV[4]), me)
if cur == false and head() == me and delay_left(marker) == 0 then
  return grant(ticket)
end
return busy(ticket, redis.call('ZRANK', queue, me))
