-- Read-only state of a multi-key lock.
-- KEYS[1..n] lock keys. ARGV[1] owner token ("" asks only who holds).
-- Returns {keys held by anyone, indexes of the keys the token does not
-- hold...}.
local out = {0}
for i = 1, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if cur ~= false then
    out[1] = out[1] + 1
  end
  if cur ~= ARGV[1] then
    out[#out + 1] = i
  end
end
return out
