-- Grants the first free key among the lock keys, starting at an offset.
-- KEYS: lock key 1, fence key 1, lock key 2, fence key 2, ...; for a queued
-- attempt (one key) then the key's wait queue and its deadlines.
-- ARGV[1]: "<attempt>|<owner>", unique to this acquire attempt, ARGV[2]: ttl
-- in ms, ARGV[3]: start offset (0-based), ARGV[4]: fence counter lifetime
-- in ms, ARGV[5]: for a queued attempt, the waiter's id (else empty),
-- ARGV[6]: how long its place is kept without another attempt, in ms,
-- ARGV[7]: the waiter's inbox channel (see handoff.lua).
--
-- A queued attempt that fails puts the waiter in the key's queue (keeping
-- its place if it is there already) with its entry "<deadline ms>|<ttl
-- ms>|<now ms>|<inbox>|<owner>"; one that succeeds takes it out. Release hands the
-- key to the first live waiter of the queue (handoff.lua), so that a
-- release wakes one waiter, which then holds the key already.
-- Returns {1, token, index, granted at in µs, remaining ttl in ms} when
-- granted, {0, shortest remaining ttl in ms} when every key is held. The
-- grant's value is "<token>|<granted at, µs>|<attempt>|<owner>".
--
-- The token is max(last + 1, server time in µs): the per-key fence counter
-- makes tokens strictly increasing, and the clock keeps them increasing when
-- the counter was lost (a restart without persistence, FLUSHALL, its own
-- expiry an hour after the last grant).
--
-- A key already granted to this attempt is returned as it is, with its
-- remaining ttl: go-redis retries a command whose reply was lost, and the
-- retry must not report the key as held by someone else (nor, for several
-- keys, take a second one); and a queued waiter that missed the message of
-- a handoff finds its grant so.
local waiter = ARGV[5]
local n = #KEYS / 2
if waiter ~= '' then n = 1 end
local function dequeue()
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('HDEL', KEYS[4], waiter)
  end
end
local lockKeys = {}
for j = 1, n do lockKeys[j] = KEYS[2 * j - 1] end
local values = redis.call('MGET', unpack(lockKeys))
for j = 1, n do
  local v = values[j]
  if v then
    local token, since, tail = string.match(v, '^(%d+)|(%d+)|(.*)$')
    if tail == ARGV[1] then
      dequeue()
      return {1, token, j - 1, since, redis.call('PTTL', KEYS[2 * j - 1])}
    end
  end
end
local shortest = -1
for i = 0, n - 1 do
  local j = (tonumber(ARGV[3]) + i) % n
  local lockKey, fenceKey = KEYS[2 * j + 1], KEYS[2 * j + 2]
  if not values[j + 1] then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local since = string.format('%.0f', now)
    -- A counter that is not a number (another client wrote it) counts as
    -- lost: the clock still keeps the tokens increasing.
    local last = tonumber(redis.call('GET', fenceKey) or '0') or 0
    local token = string.format('%.0f', math.max(last + 1, now))
    -- NX: a key of another type (MGET reads it as nil) is not ours to replace.
    if redis.call('SET', lockKey, token .. '|' .. since .. '|' .. ARGV[1], 'PX', ARGV[2], 'NX') then
      redis.call('SET', fenceKey, token, 'PX', ARGV[4])
      dequeue()
      return {1, token, j, since, tonumber(ARGV[2])}
    end
  end
  local pttl = redis.call('PTTL', lockKey)
  if pttl < 0 then pttl = 0 end -- a key without expiry: not ours to judge
  if shortest < 0 or pttl < shortest then shortest = pttl end
end
if waiter ~= '' then
  local t = redis.call('TIME')
  local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Arrival order by the µs, so that waiters queued in the same ms keep it.
  redis.call('ZADD', KEYS[3], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), waiter)
  local owner = string.match(ARGV[1], '^[^|]*|(.*)$')
  redis.call('HSET', KEYS[4], waiter, string.format('%.0f|%s|%.0f|%s|%s', nowMs + tonumber(ARGV[6]), ARGV[2], nowMs, ARGV[7], owner))
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]) + 60000)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[6]) + 60000)
end
return {0, shortest}
