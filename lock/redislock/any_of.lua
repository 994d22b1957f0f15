-- anyOf grants the first free key among n keys whose lock and fence keys
-- are KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], ... (pairs),
-- starting at offset (0-based), to the attempt tail ("<attempt>|<owner>")
-- for ttl ms, at since (now, in µs; see clock.lua), with a fence counter
-- that lives fenceMs. Prepended with clock.lua to acquire.lua (an attempt
-- on more than one key) and acquire_each.lua.
--
-- A key already granted to this attempt is returned as it is, with its
-- remaining ttl (go-redis retries a command whose reply was lost: the
-- retry must neither report the key held nor take a second one). A key of
-- another type counts as held (MGET reads it as nil, SET NX refuses it).
-- Returns {1, token, index (0-based), granted at µs, remaining ttl ms}, or
-- {0, the shortest remaining ttl ms} when every key is held.
local function anyOf(base, n, tail, ttl, offset, fenceMs, since, now)
  local lockKeys = {}
  for j = 1, n do lockKeys[j] = KEYS[base + 2 * j - 1] end
  local values = redis.call('MGET', unpack(lockKeys))
  for j = 1, n do
    if values[j] then
      local token, at, t = string.match(values[j], '^(%d+)|(%d+)|(.*)$')
      if t == tail then
        return {1, token, j - 1, at, redis.call('PTTL', lockKeys[j])}
      end
    end
  end
  local shortest = -1
  for i = 0, n - 1 do
    local j = (offset + i) % n + 1
    if not values[j] then
      local fenceKey = KEYS[base + 2 * j]
      local token = nextToken(fenceKey, since, now)
      if redis.call('SET', lockKeys[j], token .. '|' .. since .. '|' .. tail, 'PX', ttl, 'NX') then
        redis.call('SET', fenceKey, token, 'PX', fenceMs)
        return {1, token, j - 1, since, tonumber(ttl)}
      end
    end
    local pttl = redis.call('PTTL', lockKeys[j])
    if pttl < 0 then pttl = 0 end -- a key without expiry: not ours to judge
    if shortest < 0 or pttl < shortest then shortest = pttl end
  end
  return {0, shortest}
end
