-- Deletes a grant if it is still ours and wakes the waiters.
-- KEYS[1]: lock key, KEYS[2]: its fence counter, KEYS[3], KEYS[4]: its wait
-- queue and the waiters' deadlines (see wake.lua). ARGV[1]: the grant's
-- value, ARGV[2]: release channel, ARGV[3]: the user's key (the message),
-- ARGV[4]: the grant's token.
-- Returns 1 when released; 2 when the grant is gone but no grant was made
-- since (the fence counter still holds our token): an earlier attempt of
-- this release took effect and its reply was lost (go-redis retries), or
-- the grant expired; 0 when the grant was lost.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  wake(ARGV[2], ARGV[3])
  return 1
end
if not v and redis.call('GET', KEYS[2]) == ARGV[4] then
  return 2
end
return 0
