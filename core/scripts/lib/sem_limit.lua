-- sem_limit(key, default): a semaphore's stored limit (or default if none
-- is stored) and whether one is stored; nil and an error reply if the key
-- holds no permit count.
-- @include wrong_kind.lua
local function sem_limit(key, default)
  local raw = redis.call('GET', key)
  if not raw then return tonumber(default), false end
  local limit = tonumber(raw)
  if limit == nil or limit < 0 or limit % 1 ~= 0 then
    return nil, wrong_kind(key, 'holds no permit count')
  end
  return limit, true
end
