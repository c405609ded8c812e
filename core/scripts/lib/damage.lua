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

-- The waiters' wake lists behind a prefix key of the fair lock ('wake:',
-- each waiter's id from the queue) or the sequential lock ('seq:wake:',
-- each entry's sequence number, its score): the first damaged one and
-- what is wrong with it.
local function hilock_damaged_wake_list(key)
  local base, role = string.match(key, '^([^{}]*{[^}]*}:)(.+)$')
  local queue, seq
  if role == 'wake:' then
    queue = base .. 'fair:queue'
  elseif role == 'seq:wake:' then
    queue, seq = base .. 'seq:queue', true
  else
    return nil
  end
  local entries = redis.pcall('ZRANGE', queue, 0, 999, 'WITHSCORES')
  if type(entries) ~= 'table' or entries['err'] then return nil end
  for i = 1, #entries, 2 do
    local list = key .. entries[i]
    if seq then
      list = key .. string.format('%020d', tonumber(entries[i + 1]))
    end
    local what = hilock_damage_of(list)
    if what then return list, what end
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
  for _, k in ipairs(KEYS) do
    local key, what = k, hilock_damage_of(k)
    if not what then
      key, what = hilock_damaged_wake_list(k)
    end
    if what then
      return redis.error_reply('WRONGTYPE Operation against a key holding ' ..
                               'the wrong kind of value: ' .. key .. ' ' .. what)
    end
  end
end
-- Not a damaged key of the name (or not one known by its role): the
-- error as it was. A command's error keeps its code (WRONGTYPE, NOPERM,
-- OOM...); raised again as a string it would read "ERR <code> ...".
if type(hilock_result) == 'string' and string.find(hilock_result, '^%u+ ') then
  return redis.error_reply(hilock_result)
end
error(hilock_result, 0)
