-- The end of every embedded script (cmake/EmbedScripts.cmake puts the
-- script itself in the function hilock_body above): an error raised by a
-- key that holds what its family never writes there (another type, or no
-- integer where the scripts count) comes back as WRONGTYPE naming that key,
-- not as the raw error of the command or of the arithmetic that met it. A
-- script that succeeds pays one pcall; the keys are looked at only after a
-- failure. Keys are known by their role (hilock:{name}:<role>); other keys
-- (Redisson's, the fenced store's data) are not judged.
local HILOCK_ROLES = {
  ['lock'] = 'string', ['fence'] = 'count', ['wake'] = 'list',
  ['redlock'] = 'string', ['rlock'] = 'counts', ['permits'] = 'zset',
  ['limit'] = 'count', ['pwake'] = 'list', ['fair'] = 'string',
  ['fair:queue'] = 'zset', ['fair:heartbeat'] = 'zset',
  ['fair:ticket'] = 'count', ['rw:writer'] = 'counts',
  ['rw:readers'] = 'zset', ['rw:counts'] = 'counts', ['rw:intents'] = 'zset',
  ['rw:waiting'] = 'zset', ['rw:admitted'] = 'zset', ['rw:rwake'] = 'list',
  ['rw:wwake'] = 'list', ['seq:queue'] = 'zset', ['seq:session'] = 'zset',
  ['seq:holder'] = 'hash', ['seq:counter'] = 'count',
  ['seg:stock'] = 'counts', ['seg:fence'] = 'counts', ['seg:wake'] = 'list'}

local function hilock_is_int(v)
  return type(v) == 'string' and #v <= 20 and
      string.match(v, '^%-?%d+$') ~= nil
end

-- What is wrong with key (nil if nothing the scripts would trip on).
local function hilock_damage_of(key)
  local role = string.match(key, '^[^{}]*{[^}]*}:(.+)$')
  if not role then return nil end
  local want = HILOCK_ROLES[role]
  if not want then
    if string.match(role, '^wake:.') or string.match(role, '^seq:wake:%d+$') then
      want = 'list'
    elseif string.match(role, '^seg:%d+$') then
      want = 'string'
    else
      return nil
    end
  end
  local ty = redis.pcall('TYPE', key)
  if type(ty) ~= 'table' or not ty['ok'] or ty['ok'] == 'none' then
    return nil
  end
  ty = ty['ok']
  local kind = (want == 'count' and 'string') or (want == 'counts' and 'hash')
      or want
  if ty ~= kind then
    return 'holds a ' .. ty .. ', not a ' .. kind
  end
  if want == 'count' then
    if not hilock_is_int(redis.pcall('GET', key)) then
      return 'holds no integer'
    end
  elseif want == 'counts' then
    -- Owners' hold counts, fences and stock: every field but the nonces
    -- of the calls ('<owner>:op') holds an integer.
    local all = redis.pcall('HGETALL', key)
    if type(all) == 'table' then
      for i = 1, #all, 2 do
        local f = all[i]
        if string.sub(f, -3) ~= ':op' and not hilock_is_int(all[i + 1]) then
          return 'field ' .. f .. ' holds no integer'
        end
      end
    end
  end
  return nil
end

local hilock_ok, hilock_result = pcall(hilock_body)
if hilock_ok then
  return hilock_result
end
local hilock_text = hilock_result
if type(hilock_text) == 'table' then
  hilock_text = hilock_text['err']
end
hilock_text = tostring(hilock_text)
if string.find(hilock_text, '^WRONGTYPE') or
    string.find(hilock_text, 'not an integer', 1, true) or
    string.find(hilock_text, 'not a valid float', 1, true) or
    string.find(hilock_text, 'not a float', 1, true) or
    string.find(hilock_text, 'would overflow', 1, true) or
    string.find(hilock_text, 'attempt to ', 1, true) then
  for _, key in ipairs(KEYS) do
    local what = hilock_damage_of(key)
    if what then
      return redis.error_reply('WRONGTYPE Operation against a key holding ' ..
                               'the wrong kind of value: ' .. key .. ' ' .. what)
    end
  end
end
error(hilock_result, 0)
