-- Reports a grant: {value, remaining ttl in ms}; for a key held by shares
-- (shares.lua) the share that expires first, {value, remaining ms, 1}; {}
-- when the key is free. Read-only.
-- KEYS[1]: lock key, KEYS[2]: its shares.
local v = redis.call('GET', KEYS[1])
if not v then return {} end
if string.sub(v, 1, 2) == 'S|' then
  local _, now = clock()
  local nowMs = math.floor(now / 1000)
  local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. nowMs, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 then return {} end
  return {first[1], tonumber(first[2]) - nowMs, 1}
end
return {v, redis.call('PTTL', KEYS[1])}
