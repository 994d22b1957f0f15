-- Deletes a grant whoever holds it and wakes the waiters.
-- KEYS[1]: lock key. ARGV[1]: release channel, ARGV[2]: the user's key.
-- Returns 1 when a grant was removed.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return 1
end
return 0
