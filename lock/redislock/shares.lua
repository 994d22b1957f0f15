-- The helpers of the shared-grant scripts (acquire_shared.lua,
-- extend_shared.lua, release_shared.lua, inspect.lua), prepended to them
-- after clock.lua. While a key has shares, its lock key holds the shared
-- marker "S|<intent ms>" instead of a grant, with the latest share's expiry
-- as its PX, so that an exclusive attempt (SET NX) finds the key held and
-- costs nothing more; the shares are a sorted set beside it (member: the
-- share's value "<token>|<granted at µs>|<attempt>|<owner>", score: its
-- expiry in server ms). <intent ms> is the server time in ms until which
-- no new share is made: an exclusive attempt refused because of the shares
-- sets it to now + lock.IntentTTL (acquire.lua, acquire_all.lua); 0 when
-- no writer asked.

-- sharedMarker returns the intent deadline in ms when v is the shared
-- marker, else nil (v is a grant, or a value another client wrote).
local function sharedMarker(v)
  local d = string.match(v, '^S|(%d+)$')
  return d and tonumber(d)
end

-- settle drops the expired shares of sharesKey and makes lockKey's marker
-- (written as marker, or kept as it is when marker is nil) and the set
-- expire with the latest share left. With no share left it deletes both
-- and returns false.
local function settle(lockKey, sharesKey, nowMs, marker)
  redis.call('ZREMRANGEBYSCORE', sharesKey, '-inf', nowMs)
  local top = redis.call('ZRANGE', sharesKey, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', lockKey, sharesKey)
    return false
  end
  local px = string.format('%.0f', tonumber(top[2]) - nowMs)
  if marker then
    redis.call('SET', lockKey, marker, 'PX', px)
  else
    redis.call('PEXPIRE', lockKey, px)
  end
  redis.call('PEXPIRE', sharesKey, px)
  return true
end
