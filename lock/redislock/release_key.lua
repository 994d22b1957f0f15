-- releaseKey deletes a grant if it is still ours and hands the key to the
-- first live waiter of its queue (handoff.lua), or, when none waits,
-- announces the release to the subscribers of the key. KEYS[base + 1] to
-- KEYS[base + 4]: the lock key, its fence counter, its wait queue and the
-- waiters' entries; value: the grant's value; channel: the release
-- channel; userKey: the user's key (the message); token: the grant's
-- token; fenceLifetime: the fence counter's lifetime in ms.
-- Returns 1 when released; 2 when the grant is gone but no grant was made
-- since (the fence counter still holds our token): an earlier attempt of
-- this release took effect and its reply was lost (go-redis retries), or
-- the grant expired; 0 when the grant was lost.
-- Prepended (after clock.lua and handoff.lua) to release.lua,
-- release_all.lua and release_each.lua.
local function releaseKey(base, value, channel, userKey, token, fenceLifetime)
  local v = redis.call('GET', KEYS[base + 1])
  if v == value then
    redis.call('DEL', KEYS[base + 1])
    if not handoff(base, userKey, fenceLifetime) then
      redis.call('PUBLISH', channel, userKey)
    end
    return 1
  end
  if not v and redis.call('GET', KEYS[base + 2]) == token then
    return 2
  end
  return 0
end
