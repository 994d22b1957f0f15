-- The helpers of the shared-grant scripts (acquire_shared.lua,
-- extend_shared.lua, release_shared.lua, inspect.lua), prepended to them
-- after clock.lua. While a key has shares, its lock key holds the shared
-- marker "S|<intent ms>" instead of a grant, with the latest share's expiry
-- as its PX, so that an exclusive attempt (SET NX) finds the key held and
-- costs nothing more; the shares are a sorted set beside it (member: the
-- share's value "<token>|<granted at µs>|<attempt>|<owner>", score: its
-- expiry in server ms), and a hash indexes them by attempt id. <intent ms> is the server time in ms until which
-- no new share is made: an exclusive attempt refused because of the shares
-- sets it to now + lock.IntentTTL (acquire.lua, acquire_all.lua); 0 when
-- no writer asked.

-- sharedMarker returns the intent deadline in ms when v is the shared
-- marker, else nil (v is a grant, or a value another client wrote).
local function sharedMarker(v)
  local d = string.match(v, '^S|(%d+)$')
  return d and tonumber(d)
end

-- attemptOf returns the attempt id in a share's value.
local function attemptOf(v)
  return string.match(v, '^%d+|%d+|([^|]*)|') or ''
end

-- settle drops the expired shares of sharesKey (and their entries in
-- attemptsKey, the index of the shares by attempt id: a retried acquire
-- finds its share by it) and makes lockKey's marker (written as marker, or
-- kept as it is when marker is nil) and the two keys expire with the latest
-- share left. With no share left it deletes all three and returns false.
-- It drops at most 1000 shares a call, so that no call runs long.
local function settle(lockKey, sharesKey, attemptsKey, nowMs, marker)
  local gone = redis.call('ZRANGEBYSCORE', sharesKey, '-inf', nowMs, 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('ZREM', sharesKey, unpack(gone))
    for i, v in ipairs(gone) do gone[i] = attemptOf(v) end
    redis.call('HDEL', attemptsKey, unpack(gone))
  end
  local top = redis.call('ZRANGE', sharesKey, -1, -1, 'WITHSCORES')
  if #top == 0 or tonumber(top[2]) <= nowMs then
    redis.call('DEL', lockKey, sharesKey, attemptsKey)
    return false
  end
  local px = string.format('%.0f', tonumber(top[2]) - nowMs)
  if marker then
    redis.call('SET', lockKey, marker, 'PX', px)
  else
    redis.call('PEXPIRE', lockKey, px)
  end
  redis.call('PEXPIRE', sharesKey, px)
  redis.call('PEXPIRE', attemptsKey, px)
  return true
end
