-- Redlock, one node: delete the lock only if the caller's token holds it,
-- and raise the node's fence counter to the grant's fence, so that a later
-- grant on a majority that shares this node counts past it.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] fence of the grant ("0": none)
-- Returns 1 if deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local fence = tonumber(ARGV[2])
  if fence and fence > 0 then
    local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
    if cur and cur < fence then
      redis.call('SET', KEYS[2], ARGV[2])
    end
  end
  return 1
end
return 0
