-- Grants the first free key among the lock keys, starting at an offset.
-- KEYS: lock key 1, fence key 1, lock key 2, fence key 2, ...; for a queued
-- attempt (one key) then the key's wait queue and its deadlines.
-- ARGV[1]: "<attempt>|<owner>", unique to this acquire attempt, ARGV[2]: ttl
-- in ms, ARGV[3]: start offset (0-based), ARGV[4]: fence counter lifetime
-- in ms; for a queued attempt only (an attempt without sends four):
-- ARGV[5]: the waiter's id, ARGV[6]: how long its place is kept without
-- another attempt, in ms, ARGV[7]: the waiter's inbox channel (see
-- handoff.lua).
--
-- A queued attempt that fails puts the waiter in the key's queue (keeping
-- its place if it is there already) with its entry "<deadline ms>|<ttl
-- ms>|<now ms>|<inbox>|<owner>"; one that succeeds takes it out. Release hands the
-- key to the first live waiter of the queue (handoff.lua), so that a
-- release wakes one waiter, which then holds the key already.
-- Returns {1, token, index, granted at in µs, remaining ttl in ms} when
-- granted, {0, shortest remaining ttl in ms} when every key is held, and
-- for a queued attempt {0, shortest remaining ttl in ms, server time in
-- µs}. The
-- grant's value is "<token>|<granted at, µs>|<attempt>|<owner>".
--
-- The token is max(last + 1, server time in µs) (nextToken, clock.lua).
--
-- Several keys are tried by anyOf (any_of.lua, prepended).
--
-- A key already granted to this attempt is returned as it is, with its
-- remaining ttl: go-redis retries a command whose reply was lost, and the
-- retry must not report the key as held by someone else (nor, for several
-- keys, take a second one); and a queued waiter that missed the message of
-- a handoff finds its grant so.
--
-- A single-key attempt refused because shares hold the key (its value is
-- the shared marker, see shares.lua) marks the key as wanted by a writer
-- until intentMs (lock.IntentTTL, set by the Go code) from now.
--
-- One key (TryAcquire, a queued attempt) costs four calls when it is free:
-- TIME, the fence counter, SET NX GET (which reads the key as it writes
-- it) and the counter's update; a held key one more (PTTL), and queueing.
local waiter = ARGV[5] or ''
local n = #KEYS / 2
if waiter ~= '' then n = 1 end
local function dequeue()
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('HDEL', KEYS[4], waiter)
  end
end
-- own is the reply for the key at j when its value v is this attempt's
-- grant, else nil.
local function own(j, v)
  local token, since, tail = string.match(v, '^(%d+)|(%d+)|(.*)$')
  if tail == ARGV[1] then
    dequeue()
    return {1, token, j - 1, since, redis.call('PTTL', KEYS[2 * j - 1])}
  end
end
local shortest = -1
local function busy(lockKey)
  local pttl = redis.call('PTTL', lockKey)
  if pttl < 0 then pttl = 0 end -- a key without expiry: not ours to judge
  if shortest < 0 or pttl < shortest then shortest = pttl end
end
local function granted(j, token, since)
  redis.call('SET', KEYS[2 * j + 2], token, 'PX', ARGV[4])
  dequeue()
  return {1, token, j, since, tonumber(ARGV[2])}
end
local since, now = clock()
if n == 1 then
  local token = nextToken(KEYS[2], since, now)
  local v = redis.pcall('SET', KEYS[1], token .. '|' .. since .. '|' .. ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
  if not v then
    return granted(0, token, since)
  end
  if type(v) == 'string' then
    local r = own(1, v)
    if r then return r end
    if string.sub(v, 1, 2) == 'S|' then
      -- Shares hold the key (shares.lua): a writer wants it, so no new
      -- share is made for intentMs.
      redis.call('SET', KEYS[1], string.format('S|%.0f', math.floor(now / 1000) + intentMs), 'KEEPTTL')
    end
  elseif not string.find(v.err, '^WRONGTYPE') then
    return v
  end
  -- Held, or a key of another type, which is not ours to replace.
  busy(KEYS[1])
else
  return anyOf(0, n, ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], since, now)
end
if waiter ~= '' then
  local nowMs = math.floor(now / 1000)
  -- Arrival order by the µs, so that waiters queued in the same ms keep it.
  redis.call('ZADD', KEYS[3], 'NX', now, waiter)
  local owner = string.match(ARGV[1], '^[^|]*|(.*)$')
  redis.call('HSET', KEYS[4], waiter, string.format('%.0f|%s|%.0f|%s|%s', nowMs + tonumber(ARGV[6]), ARGV[2], nowMs, ARGV[7], owner))
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]) + 60000)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[6]) + 60000)
  -- The server's time, so that the waiter can tell a handoff message
  -- that reaches it after this attempt from one it made after the
  -- handoff (AcquireQueued).
  return {0, shortest, since}
end
return {0, shortest}
