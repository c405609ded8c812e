-- Change the leader's value, only while the caller leads, and tell the
-- observers. Safe to resend (it sets, never adds).
-- KEYS[1] leadership hash. ARGV[1] owner token, ARGV[2] the value.
-- Returns 1 if changed, 0 if the caller does not lead.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.pcall('PUBLISH', KEYS[1], 'value')
return 1
