-- Grants a share of a key (TryAcquireShared) unless an exclusive grant
-- holds it or a writer waits for it: the intent marker lives (see
-- shares.lua), or the key's queue has a live waiter (queued waiters are
-- writers: AcquireQueued).
-- KEYS: lock key, fence counter, wait queue, waiters' entries, shares.
-- ARGV[1]: "<attempt>|<owner>", ARGV[2]: ttl in ms, ARGV[3]: the fence
-- counter's lifetime in ms.
-- Returns as acquire.lua: {1, token, 0, granted at in µs, ttl in ms}, or
-- {0, remaining ms} (of the exclusive grant, the intent, or the first
-- waiter's place). The token is drawn from the key's fence counter, as an
-- exclusive grant's.
local since, now = clock()
local nowMs = math.floor(now / 1000)
local v = redis.call('GET', KEYS[1])
if v then
  local intent = sharedMarker(v)
  if not intent then
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
redis.call('ZADD', KEYS[5], nowMs + tonumber(ARGV[2]), token .. '|' .. since .. '|' .. ARGV[1])
redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
settle(KEYS[1], KEYS[5], nowMs, 'S|0')
return {1, token, 0, since, tonumber(ARGV[2])}
