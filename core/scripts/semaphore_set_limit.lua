-- Operator: set a semaphore's limit. Holders keep their permits (a lower
-- limit takes effect as they leave); a higher one wakes as many waiters as
-- there are free permits (up to 1024 at once).
-- KEYS[1] permits zset, KEYS[2] limit, KEYS[3] permit wake list.
-- ARGV[1] the new limit (>= 0).
-- Returns {limit, live permits}.
-- @wakes: PING goes first, so the woken hear before the caller does.
-- @include sem_wake.lua
-- @include clock.lua
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('SET', KEYS[2], ARGV[1])
local limit = tonumber(ARGV[1])
local used = redis.call('ZCARD', KEYS[1])


sem_wake(KEYS[3], limit - used, limit - used)
return {limit, used}
