-- wake publishes a wake-up to the first two live waiters of a key's queue
-- (KEYS[3]: the queue, KEYS[4]: the waiters' deadlines) on channel: "\1",
-- the user's key, "\0", the waiter's id. Waiters whose deadline has passed
-- (they stopped trying: crashed, or gone without leaving) are dropped on
-- the way. Two, not one, so that a waiter that died since its last attempt
-- delays nobody; at most ten entries are looked at. Prepended to
-- release.lua and force_release.lua.
local function wake(channel, userKey)
  local t = redis.call('TIME')
  local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local woken = 0
  for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, 9)) do
    local deadline = tonumber(redis.call('HGET', KEYS[4], w) or '0')
    if deadline < nowMs then
      redis.call('ZREM', KEYS[3], w)
      redis.call('HDEL', KEYS[4], w)
    else
      redis.call('PUBLISH', channel, '\1' .. userKey .. '\0' .. w)
      woken = woken + 1
      if woken == 2 then return end
    end
  end
end
