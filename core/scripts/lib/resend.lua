-- Resending the reentrant and read-write locks' release scripts (a reply
-- lost to a broken connection is sent once more on a fresh one). Each call
-- carries a nonce; hash field '<owner>:op' of the side's hash holds the
-- nonce of the last call applied for owner while the owner holds levels,
-- and a string done marker (a key of its own per owner) the nonce of the
-- release that removed the owner's last level, for a short while.
-- resent_release(hash, done, owner, nonce, undoes): the first run's answer
-- if this release already ran (the remaining count, or 0), else nil; -2 if
-- it undoes an acquire (undoes: that call's nonce, or nil) that did not
-- apply, or is no longer the owner's last call (nothing to undo).
local function resent_release(hash, done, owner, nonce, undoes)
  local last = redis.call('HGET', hash, owner .. ':op')
  if last == nonce then
    return tonumber(redis.call('HGET', hash, owner) or '0')
  end
  if redis.call('GET', done) == nonce then
    return 0
  end
  if undoes and last ~= undoes then
    return -2
  end
  return nil
end
-- released(done, nonce, ms): the owner's last level is gone; a resend of
-- this release within ms answers 0 again. Only a release that removed a
-- level writes it, so a real "not owner" is never turned into success.
local function released(done, nonce, ms)
  redis.call('SET', done, nonce, 'PX', ms)
end
-- leave_level(hash, done, owner, nonce, ms, undoes, ttl): leave one of
-- owner's levels of a lock kept in hash alone (field owner: its count),
-- safe to resend. Returns the levels left, and true when this run removed
-- the last one: it deleted the hash and wrote the done marker (see
-- released), and the caller hands the lock on. -1 when owner holds no
-- level, -2 as resent_release says, and a resend's first answer change
-- nothing. While levels are left the call's nonce is in '<owner>:op', and
-- the hash lives ttl ms more (if given).
local function leave_level(hash, done, owner, nonce, ms, undoes, ttl)
  local again = resent_release(hash, done, owner, nonce, undoes)
  if again then
    return again, false
  end
  if redis.call('HEXISTS', hash, owner) == 0 then
    return -1, false
  end
  local n = redis.call('HINCRBY', hash, owner, -1)
  if n > 0 then
    redis.call('HSET', hash, owner .. ':op', nonce)
    if ttl then
      redis.call('PEXPIRE', hash, ttl)
    end
    return n, false
  end
  redis.call('DEL', hash)
  released(done, nonce, ms)
  return 0, true
end
