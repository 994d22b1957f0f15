-- Makes many independent claims (lock.ClaimEach): each free key is taken
-- as acquire.lua takes one key for an attempt without a waiter (token
-- max(last + 1, server µs) from the key's fence counter, the value
-- "<token>|<granted at µs>|<attempt>|<owner>", PX the claim's ttl), and
-- left to lapse. Prepended with clock.lua.
-- KEYS: lock key 1, fence key 1, lock key 2, fence key 2, ... (at most
-- claimChunk, 64, pairs, all of one Cluster slot).
-- ARGV[2j - 1], ARGV[2j]: claim j's "<attempt>|<owner>" (an attempt id of
-- its own) and its ttl in ms.
-- A claim's key is usually one-off (a timer's tick), so a counter it
-- creates lives as long as the claim, not fenceLifetime (an hour: 36
-- million counters for 10,000 timers ticking every second); a counter that
-- exists keeps its lifetime. After the claim the clock keeps the key's
-- tokens increasing (max(last + 1, server µs)), as after a lost counter.
-- Returns the server time of the grants in µs (a string), then one entry
-- per claim: its token, a string, when granted; "<token>|<granted at µs>"
-- when the key already holds this claim's grant (go-redis retried the
-- command after its reply was lost); the key's remaining ttl in ms, a
-- number, when it is held (a key of another type counts as held, as in
-- acquire.lua). A failed write (out of memory) ends the script with its
-- error: the claims made so far lapse with their ttl.
local since, now = clock()
local out = {since}
local fenceKeys = {}
for j = 1, #KEYS / 2 do fenceKeys[j] = KEYS[2 * j] end
-- One read of every counter: a key claimed twice in the chunk is granted
-- at most once (SET NX), so no counter is read after its own update.
local fences = redis.call('MGET', unpack(fenceKeys))
for j = 1, #KEYS / 2 do
  local lockKey, fenceKey, tail = KEYS[2 * j - 1], KEYS[2 * j], ARGV[2 * j - 1]
  local token = tokenAfter(fences[j], since, now)
  local v = redis.pcall('SET', lockKey, token .. '|' .. since .. '|' .. tail, 'PX', ARGV[2 * j], 'NX', 'GET')
  if not v then
    if fences[j] then
      redis.call('SET', fenceKey, token, 'KEEPTTL')
    else
      redis.call('SET', fenceKey, token, 'PX', ARGV[2 * j])
    end
    out[j + 1] = token
  else
    if type(v) == 'table' and not string.find(v.err, '^WRONGTYPE') then
      return v
    end
    if type(v) == 'string' then
      local granted, rest = string.match(v, '^(%d+|%d+)|(.*)$')
      if rest == tail then out[j + 1] = granted end
    end
    if not out[j + 1] then
      local pttl = redis.call('PTTL', lockKey)
      if pttl < 0 then pttl = 0 end
      out[j + 1] = pttl
    end
  end
end
return out
