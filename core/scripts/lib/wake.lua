-- ring(list): the doorbell behind a wake list. A process whose waiters
-- share one subscriber connection hears the list's name as a channel, with
-- how many wake-ups the list now holds, and lets that many of its waiters
-- try to pop one. pcall: a user without channel rights still releases (its
-- waiters then block on the list itself).
local function ring(list)
  redis.pcall('PUBLISH', list, redis.call('LLEN', list))
end
