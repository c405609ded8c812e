-- Delete a barrier or double barrier: its waiters end broken.
-- KEYS[1] hash, KEYS[2] parties zset.
-- Returns the number of keys deleted.
local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.pcall('PUBLISH', KEYS[1], 'deleted')
return n
