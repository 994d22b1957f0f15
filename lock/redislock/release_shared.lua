-- Deletes a share if it is still there (see shares.lua). The last share's
-- release frees the key: it hands it to the first live waiter of its queue
-- (handoff.lua) or, when none waits, announces the release; a release
-- while a writer's intent lives announces it too, for writers that wait
-- without a queue.
-- KEYS: lock key, fence counter, wait queue, waiters' entries, shares,
-- their index.
-- ARGV[1]: the share's value, ARGV[2]: release channel, ARGV[3]: the
-- user's key, ARGV[4]: the share's token, ARGV[5]: the fence counter's
-- lifetime in ms.
-- Returns as release.lua: 1 when released, 2 when the share is gone and no
-- grant was made since (a retried release, or an expiry), 0 when lost.
local _, now = clock()
local nowMs = math.floor(now / 1000)
local v = redis.call('GET', KEYS[1])
local intent = v and sharedMarker(v)
local s = intent and redis.call('ZSCORE', KEYS[5], ARGV[1])
if not s or tonumber(s) <= nowMs then
  if redis.call('GET', KEYS[2]) == ARGV[4] then
    return 2
  end
  return 0
end
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[6], attemptOf(ARGV[1]))
if not settle(KEYS[1], KEYS[5], KEYS[6], nowMs, nil) then
  if not handoff(0, ARGV[3], ARGV[5]) then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
elseif intent > nowMs then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
