-- A lock delay's marker (hilock:{name}:delay): a string whose value is the
-- delay in ms, living the grant's TTL plus the delay. A grant with a delay
-- writes it, every renewal pushes it, the holder's release deletes it, and
-- every grant of the name waits while it outlives its grant.

-- delay_left(marker): the ms left on the marker (0: none, or no marker key
-- passed): a grant that ended without its holder's release keeps the name
-- from everyone until then.
local function delay_left(marker)
  if not marker then
    return 0
  end
  return math.max(0, redis.call('PTTL', marker))
end

-- set_delay(marker, delay, ttl): a grant of ttl ms with a delay of delay
-- ms (a string from ARGV, or nil: none) writes its marker.
local function set_delay(marker, delay, ttl)
  if delay then
    redis.call('SET', marker, delay, 'PX', tonumber(ttl) + tonumber(delay))
  end
end

-- push_delay(marker, ms): the marker, if it is there, lives ms (its hold's
-- new TTL) plus the delay. A hold that has a marker was granted with it,
-- so the marker is the hold's own.
local function push_delay(marker, ms)
  local delay = tonumber(redis.call('GET', marker))
  if delay then
    redis.call('PEXPIRE', marker, tonumber(ms) + delay)
  end
end
