-- ring(list): the doorbell behind a wake list. A process whose waiters
-- share one subscriber connection hears the list's name as a channel, with
-- how many wake-ups the list now holds, and lets that many of its waiters
-- try to pop one. When that process is the only one listening here, the
-- message says "solo": its waiter tries the lock at once, without the pop
-- (the wake-up left in the list costs the next waiter to arrive one early
-- retry, and lapses with the list). pcall: a user without channel rights
-- still releases (its waiters then block on the list itself).
local function ring(list)
  local n = redis.call('LLEN', list)
  local subs = redis.pcall('PUBSUB', 'NUMSUB', list)
  if type(subs) == 'table' and subs[2] == 1 then
    redis.pcall('PUBLISH', list, n .. ' solo')
  else
    redis.pcall('PUBLISH', list, n)
  end
end
-- wake_up(list, count, ms): top the wake list up to count elements (one
-- element wakes one waiter), keep it ms, and ring it.
local function wake_up(list, count, ms)
  for _ = redis.call('LLEN', list) + 1, count do
    redis.call('RPUSH', list, '1')
  end
  redis.call('PEXPIRE', list, ms)
  ring(list)
end
-- wake_one(list): one wake-up for one waiter of an exclusive lock. An
-- element nobody takes costs the next waiter one early retry, and lapses
-- after 5 s.
local function wake_one(list)
  wake_up(list, 1, 5000)
end
-- wake_n(list, n): at least n wake-ups in a wake list (n waiters let in at
-- once: admitted readers, every waiter of a forced release), rung.
local function wake_n(list, n)
  wake_up(list, n, 5000)
end
