-- Grant every name of a multi-key lock, or none, with one fencing token per
-- name. The keys are those of the expiring lock of each name, so a single
-- lock and a multi-key lock on a shared name exclude each other.
-- KEYS[1..n] lock keys, KEYS[n+1..2n] wake lists, KEYS[2n+1..3n] fence
-- counters, KEYS[3n+1..4n] lock-delay markers (every grant checks them,
-- whatever its own delay), names in sorted order (one hash slot).
-- ARGV[1] owner token, ARGV[2] ttl in ms, ARGV[3] index of the wake list
-- whose wake-up started this attempt ("0": none), ARGV[4] "woken"
-- (optional; any other value: not woken), ARGV[5] this grant's lock delay
-- in ms (optional, > 0): each grant sets the markers to ttl + the delay. A
-- name whose marker is there while its lock key is not is busy for the
-- marker's pttl. Woken: rung by a release of that name, the attempt takes the
-- release's wake-up itself, in its round trip; none left (a waiter of
-- another process took it) and it is not its turn: it is told that name's
-- pttl, 0 if it is free (it looks again in 1 ms).
-- Returns {1, fence_1, ..., fence_n} when granted, or {0, pttl, i} when
-- name i is held by another owner (pttl: its remaining TTL, -1 if none).
-- @grant: grants or renews a hold (WAIT follows when wait_replicas is set).
-- @include fence.lua
-- @include wake.lua
-- @include delay.lua
local n = #KEYS / 4
local token = ARGV[1]
local woken = tonumber(ARGV[3]) or 0
if ARGV[4] == 'woken' and woken >= 1 and woken <= n and
    redis.call('GET', KEYS[woken]) ~= token and
    redis.call('LPOP', KEYS[n + woken]) == false then
  local pttl = redis.call('PTTL', KEYS[woken])
  return {0, pttl == -2 and 0 or pttl, woken}
end
local free = {}
-- Check every name before writing anything: all or nothing.
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  -- A grant of name i ended without its holder's release: its lock delay
  -- runs while its marker lives.
  local wait = cur == false and delay_left(KEYS[3 * n + i])
  if cur == false and wait == 0 then
    free[i] = true
  elseif cur ~= token then
    -- We took a wake-up meant for whoever gets name `woken`, and that name
    -- is free but of no use to us: hand the wake-up back.
    if woken > 0 and woken <= n and woken ~= i and
        redis.call('EXISTS', KEYS[woken]) == 0 then
      wake_one(KEYS[n + woken])
    end
    return {0, wait or redis.call('PTTL', KEYS[i]), i}
  end
  -- cur == token: a resend of our own grant (reply lost to a broken
  -- connection); that name is still ours.
end
-- Counters first: a damaged counter fails the script before any lock key
-- is written.
local out = {1}
for i = 1, n do
  if free[i] then
    out[i + 1] = next_fence(KEYS[2 * n + i])
  else
    out[i + 1] = tonumber(redis.call('GET', KEYS[2 * n + i]) or '0')
  end
end
for i = 1, n do
  if free[i] then
    redis.call('SET', KEYS[i], token, 'PX', ARGV[2])
    set_delay(KEYS[3 * n + i], ARGV[5], ARGV[2])
  end
end
return out
