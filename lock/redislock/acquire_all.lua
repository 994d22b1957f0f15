-- Grants every key of a set, or none (TryAcquireAll): each key exclusively,
-- with its own token from its own fence counter, when no key is held (by
-- a grant or by shares); queues are not looked at, as TryAcquire does not.
-- KEYS: lock key 1, fence key 1, lock key 2, fence key 2, ...
-- ARGV[1]: "G<group id>|<owner>", the tail of every key's value, ARGV[2]:
-- ttl in ms, ARGV[3]: the fence counters' lifetime in ms.
-- Returns {1, granted at in µs, remaining ttl in ms, token 1, token 2, ...}
-- when granted; {0, longest remaining ttl in ms, index of a held key
-- (0-based)} when some key is held. A key held by shares is marked as
-- wanted by a writer, as acquire.lua does (intentMs, set by the Go code).
-- A set already granted to this group (a retried command) is returned as
-- it is, with the shortest remaining ttl; a token of 0 stands for a key
-- whose grant is gone since.
local n = #KEYS / 2
local lockKeys = {}
for j = 1, n do lockKeys[j] = KEYS[2 * j - 1] end
local values = redis.call('MGET', unpack(lockKeys))
local since, now = clock()
local nowMs = math.floor(now / 1000)
local mine = {1, since, -1}
for j = 1, n do
  local token, at, tail = string.match(values[j] or '', '^(%d+)|(%d+)|(.*)$')
  if tail == ARGV[1] then
    if mine[3] < 0 then
      mine[2] = at
      mine[3] = tonumber(ARGV[2])
    end
    mine[3 + j] = token
    local pttl = redis.call('PTTL', lockKeys[j])
    if pttl < mine[3] then mine[3] = pttl end
  end
end
if mine[3] ~= -1 then
  for j = 1, n do mine[3 + j] = mine[3 + j] or '0' end
  return mine
end
local longest, held = -1, -1
for j = 1, n do
  local v = values[j]
  if v then
    local pttl = redis.call('PTTL', lockKeys[j])
    if pttl < 0 then pttl = 0 end
    if pttl > longest then longest, held = pttl, j - 1 end
    if string.sub(v, 1, 2) == 'S|' then
      redis.call('SET', lockKeys[j], string.format('S|%.0f', nowMs + intentMs), 'KEEPTTL')
    end
  end
end
if held >= 0 then
  return {0, longest, held}
end
local granted = {1, since, tonumber(ARGV[2])}
for j = 1, n do
  local token = nextToken(KEYS[2 * j], since, now)
  -- NX: a key of another type (MGET reads it as nil) is not ours to
  -- replace; the keys taken so far are given back.
  if not redis.call('SET', lockKeys[j], token .. '|' .. since .. '|' .. ARGV[1], 'PX', ARGV[2], 'NX') then
    for i = 1, j - 1 do redis.call('DEL', lockKeys[i]) end
    return {0, 0, j - 1}
  end
  redis.call('SET', KEYS[2 * j], token, 'PX', ARGV[3])
  granted[3 + j] = token
end
return granted
