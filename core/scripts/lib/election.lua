-- leader_of(key): the owner token that leads in leadership hash key (the
-- one field besides 'fence') and its value; nil when nobody leads.
local function leader_of(key)
  local h = redis.call('HGETALL', key)
  for i = 1, #h, 2 do
    if h[i] ~= 'fence' then
      return h[i], h[i + 1]
    end
  end
  return nil
end
