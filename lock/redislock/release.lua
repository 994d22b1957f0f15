-- Deletes a grant if it is still ours and hands the key to the first live
-- waiter of its queue (handoff.lua), or, when none waits, announces the
-- release to the subscribers of the key.
-- KEYS[1]: lock key, KEYS[2]: its fence counter, KEYS[3], KEYS[4]: its wait
-- queue and the waiters' entries. ARGV[1]: the grant's value, ARGV[2]:
-- release channel, ARGV[3]: the user's key (the message), ARGV[4]: the
-- grant's token, ARGV[5]: the fence counter's lifetime in ms.
-- Returns 1 when released; 2 when the grant is gone but no grant was made
-- since (the fence counter still holds our token): an earlier attempt of
-- this release took effect and its reply was lost (go-redis retries), or
-- the grant expired; 0 when the grant was lost.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if not handoff(0, ARGV[3], ARGV[5]) then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return 1
end
if not v and redis.call('GET', KEYS[2]) == ARGV[4] then
  return 2
end
return 0
