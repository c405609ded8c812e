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
