-- The watchdog's renewal of a sequential lock holder's session.
-- KEYS[1] hilock:{name}:seq:session, KEYS[2] :seq:queue, KEYS[3]
-- :seq:holder. ARGV[1] owner, ARGV[2] ttl ms.
-- Returns 1 renewed, 0 not owned (the session lapsed or the grant is
-- another's); an expired session is never revived.
-- The queue's and holder's expiry is kept at least as long as the
-- session's, so the entry's place and grant never lapse before it.
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local session, me = KEYS[1], ARGV[1]
local e = redis.call('ZSCORE', session, me)
if not e or tonumber(e) <= now then
  return 0
end
local queue, holder = KEYS[2], KEYS[3]
if redis.call('HGET', holder, 'owner') ~= me then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', session, 'XX', now + ttl, me)
local ms = ttl + 1000
for _, k in ipairs({session, queue, holder}) do
  local left = redis.call('PTTL', k)
  if left >= 0 and left < ms then
    redis.call('PEXPIRE', k, ms)
  end
end
return 1
