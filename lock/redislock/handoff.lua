-- handoff gives a key that was just freed to the first live waiter of its
-- queue (KEYS[3]: the queue, a sorted set by arrival; KEYS[4]: the
-- waiters' entries, "<deadline ms>|<ttl ms>|<last attempt ms>|<inbox>|
-- <owner>") and tells it on its Lock's inbox channel, which no other Lock
-- listens to: "\2", the user's key, "\0", the waiter's id,
-- "\0", the token, "\0", the grant's time in µs, "\0", how many ms passed
-- on the server between the waiter's last attempt and the grant (the
-- waiter's ValidUntil counts from its last attempt plus that). The grant's
-- value is the one the waiter's own attempt would have made, so a waiter
-- that missed the message finds the grant at its next attempt. Waiters
-- whose place lapsed (they stopped trying: crashed, or gone without
-- leaving) are dropped on the way; at most ten entries are looked at.
-- KEYS[1], KEYS[2]: the lock key and its fence counter; KEYS[base + 1] to
-- KEYS[base + 4] for a script over several keys (release_all.lua), the four
-- keys of the one it hands on. Returns true when the key was handed on.
-- Prepended (after clock.lua) to release_key.lua (for release.lua,
-- release_all.lua and release_each.lua), release_shared.lua,
-- force_release.lua and leave.lua.
local function handoff(base, userKey, fenceLifetime)
  -- Nobody waits, the common case: EXISTS costs a third of an empty
  -- ZRANGE, and the clock is not read.
  if redis.call('EXISTS', KEYS[base + 3]) == 0 then
    return false
  end
  local waiters = redis.call('ZRANGE', KEYS[base + 3], 0, 9)
  local since, nowUs = clock()
  local nowMs = math.floor(nowUs / 1000)
  for _, w in ipairs(waiters) do
    local entry = redis.call('HGET', KEYS[base + 4], w) or ''
    local deadline, ttl, last, inbox, owner = string.match(entry, '^(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
    redis.call('ZREM', KEYS[base + 3], w)
    redis.call('HDEL', KEYS[base + 4], w)
    -- An entry another client wrote may hold any number: a ttl outside
    -- 1 ms .. lock.MaxTTL (31622400000 ms) would fail the SET below, and
    -- with it every release of the key; such a waiter is dropped.
    local ttlMs = tonumber(ttl or '')
    if deadline and tonumber(deadline) >= nowMs and ttlMs and ttlMs >= 1 and ttlMs <= 31622400000 then
      local token = nextToken(KEYS[base + 2], since, nowUs)
      redis.call('SET', KEYS[base + 1], token .. '|' .. since .. '|' .. w .. '|' .. owner, 'PX', ttl)
      redis.call('SET', KEYS[base + 2], token, 'PX', fenceLifetime)
      redis.call('PUBLISH', inbox, '\2' .. userKey .. '\0' .. w .. '\0' .. token .. '\0' .. since
        .. '\0' .. string.format('%.0f', math.max(0, nowMs - tonumber(last))))
      return true
    end
  end
  return false
end
