-- wrong_kind(key, what): the error for a key of the name that holds the
-- wrong kind of value, in the words of Redis's own WRONGTYPE error; what
-- says which part and how (e.g. 'holds no integer').
local function wrong_kind(key, what)
  return redis.error_reply('WRONGTYPE Operation against a key holding ' ..
                           'the wrong kind of value: ' .. key .. ' ' .. what)
end
