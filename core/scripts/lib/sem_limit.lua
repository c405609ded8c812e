-- sem_limit(key, default): a semaphore's stored limit (or default if none
-- is stored) and whether one is stored; nil and an error reply if the key
-- holds no permit count.
local function sem_limit(key, default)
  local raw = redis.call('GET', key)
  if not raw then return tonumber(default), false end
  local limit = tonumber(raw)
  if limit == nil or limit < 0 or limit % 1 ~= 0 then
    return nil, redis.error_reply('WRONGTYPE Operation against a key ' ..
                                  'holding the wrong kind of value: ' ..
                                  key .. ' holds no permit count')
  end
  return limit, true
end
