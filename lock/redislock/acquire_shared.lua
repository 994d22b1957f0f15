-- Grants a share of a key (TryAcquireShared) unless an exclusive grant
-- holds it or a writer waits for it: the intent marker lives (see
-- shares.lua), or the key's queue has a live waiter (queued waiters are
-- writers: AcquireQueued).
-- KEYS: lock key, fence counter, wait queue, waiters' entries, shares,
-- the shares' index by attempt id.
-- ARGV[1]: "<attempt>|<owner>", ARGV[2]: ttl in ms, ARGV[3]: the fence
-- counter's lifetime in ms.
-- Returns as acquire.lua: {1, token, 0, granted at in µs, ttl in ms}, or
-- {0, remaining ms} (of the exclusive grant, the intent, or the first
-- waiter's place). The token is drawn from the key's fence counter, as an
-- exclusive grant's. A share already made for this attempt (go-redis
-- retried a command whose reply was lost) is returned as it is, with its
-- remaining ttl.
local since, now = clock()
local nowMs = math.floor(now / 1000)
local v = redis.call('GET', KEYS[1])
if v then
  local intent = sharedMarker(v)
  if intent then
    local mine = redis.call('HGET', KEYS[6], string.match(ARGV[1], '^[^|]*'))
    local s = mine and tonumber(redis.call('ZSCORE', KEYS[5], mine) or '0')
    if s and s > nowMs then
      local token, at = string.match(mine, '^(%d+)|(%d+)|')
      return {1, token, 0, at, s - nowMs}
    end
  else
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl < 0 then pttl = 0 end
    return {0, pttl}
  end
  if intent > nowMs then
    return {0, intent - nowMs}
  end
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, 9)) do
    local deadline = tonumber(string.match(redis.call('HGET', KEYS[4], w) or '', '^(%d+)|') or '0')
    if deadline >= nowMs then
      return {0, deadline - nowMs + 1}
    end
  end
end
local token = nextToken(KEYS[2], since, now)
local share = token .. '|' .. since .. '|' .. ARGV[1]
redis.call('ZADD', KEYS[5], nowMs + tonumber(ARGV[2]), share)
redis.call('HSET', KEYS[6], string.match(ARGV[1], '^[^|]*'), share)
redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
settle(KEYS[1], KEYS[5], KEYS[6], nowMs, 'S|0')
return {1, token, 0, since, tonumber(ARGV[2])}
