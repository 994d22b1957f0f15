-- A queued waiter gives up (its context ended): it leaves the queue, and
-- if the key was handed to it meanwhile (handoff.lua) it releases that
-- grant, handing the key on.
-- KEYS: as release.lua. ARGV[1]: the waiter's id, ARGV[2]: release
-- channel, ARGV[3]: the user's key, ARGV[4]: the fence counter's lifetime.
-- Returns 1 when it released a grant handed to it, else 0.
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%d+|%d+|([^|]*)|') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if not handoff(0, ARGV[3], ARGV[4]) then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return 1
end
return 0
