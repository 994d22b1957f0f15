-- Makes many independent claims (lock.ClaimEach): each free key is taken
-- as acquire.lua takes one key for an attempt without a waiter (token
-- max(last + 1, server µs) from the key's fence counter, the value
-- "<token>|<granted at µs>|<attempt>|<owner>", PX the claim's ttl), and
-- left to lapse. Prepended with clock.lua.
-- KEYS: lock key 1, fence key 1, lock key 2, fence key 2, ... (at most
-- claimChunk, 64, pairs, all of one Cluster slot).
-- ARGV[2j - 1], ARGV[2j]: claim j's "<attempt>|<owner>" (an attempt id of
-- its own) and its ttl in ms.
-- A claim creates no fence counter: its key is usually one-off (a timer's
-- tick), and the grant's value holds its token while it lives. Nothing
-- can take the key before the claim lapses but ForceRelease, which leaves
-- a counter past the claim's token (force_release.lua); after the lapse
-- the clock keeps the key's tokens increasing (max(last + 1, server µs)),
-- as after a lost counter. An hour's counter per claim piled up to 36
-- million counters for 10,000 timers ticking every second, and even a
-- counter that lived as long as its claim cost a write per claim, a
-- quarter of the script's time. A counter that exists (the key was
-- acquired before) is moved to the claim's token and keeps its lifetime.
-- Returns the server time of the grants in µs (a string), then one entry
-- per claim: its token, a string, when granted; "<token>|<granted at µs>"
-- when the key already holds this claim's grant (go-redis retried the
-- command after its reply was lost); the key's remaining ttl in ms, a
-- number, when it is held (a key of another type counts as held, as in
-- acquire.lua). A failed write (out of memory) ends the script with its
-- error: the claims made so far lapse with their ttl.
local since, now = clock()
local out = {since}
-- One read of every lock key and counter (KEYS alternate them): a held
-- key is refused without a write, and no counter is read after its own
-- update (a key claimed twice in the chunk is granted once, see taken).
local vals = redis.call('MGET', unpack(KEYS))
local taken = {}
for j = 1, #KEYS / 2 do
  local lockKey, fenceKey, tail = KEYS[2 * j - 1], KEYS[2 * j], ARGV[2 * j - 1]
  local v, fence = vals[2 * j - 1], vals[2 * j]
  if v then
    local granted, rest = string.match(v, '^(%d+|%d+)|(.*)$')
    if rest == tail then out[j + 1] = granted end
  elseif not taken[lockKey] then
    -- NX: a key of another type (MGET reads it as none) is held.
    local token = tokenAfter(fence, since, now)
    local ok = redis.pcall('SET', lockKey, token .. '|' .. since .. '|' .. tail, 'PX', ARGV[2 * j], 'NX')
    if type(ok) == 'table' and ok.err then
      return ok
    end
    if ok then
      taken[lockKey] = true
      if fence then
        redis.call('SET', fenceKey, token, 'KEEPTTL')
      end
      out[j + 1] = token
    end
  end
  if not out[j + 1] then
    local pttl = redis.call('PTTL', lockKey)
    if pttl < 0 then pttl = 0 end
    out[j + 1] = pttl
  end
end
return out
