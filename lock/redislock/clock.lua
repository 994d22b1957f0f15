-- clock reads the server's time: as a decimal string of µs (the grant's
-- time in its value) and as a number. Built from TIME's two parts, not
-- with string.format, which costs more than a call to Redis.
local function clock()
  local t = redis.call('TIME')
  local since = t[1] .. string.sub('00000' .. t[2], -6)
  return since, tonumber(since)
end
-- nextToken is the token of a grant made at since (now, in µs): max(last +
-- 1, now), where last is the key's fence counter (fenceKey). The counter
-- makes tokens strictly increasing, and the clock keeps them increasing
-- when the counter was lost (a restart without persistence, FLUSHALL, its
-- own expiry an hour after the last grant). A counter that is not a number
-- (another client wrote it) counts as lost. Prepended to acquire.lua and
-- handoff.lua. tokenAfter is the same for a counter already read (last:
-- its value, or false for none), as claim_each.lua reads them all at once.
local function tokenAfter(last, since, now)
  last = tonumber(last or '0') or 0
  if last >= now then
    return string.format('%.0f', last + 1)
  end
  return since
end
local function nextToken(fenceKey, since, now)
  return tokenAfter(redis.call('GET', fenceKey), since, now)
end
