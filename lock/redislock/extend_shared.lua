-- Renews a share if it is still there (see shares.lua).
-- KEYS[1]: lock key, KEYS[2]: shares, KEYS[3]: their index. ARGV[1]: the share's value, ARGV[2]:
-- ttl in ms. Returns 1 when renewed, 0 when the share is gone.
local _, now = clock()
local nowMs = math.floor(now / 1000)
local v = redis.call('GET', KEYS[1])
if not v or not sharedMarker(v) then
  return 0
end
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s or tonumber(s) <= nowMs then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', nowMs + tonumber(ARGV[2]), ARGV[1])
settle(KEYS[1], KEYS[2], KEYS[3], nowMs, nil)
return 1
