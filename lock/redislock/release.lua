-- Deletes a grant if it is still ours and wakes the waiters.
-- KEYS[1]: lock key. ARGV[1]: the grant's value, ARGV[2]: release channel,
-- ARGV[3]: the user's key (the message).
-- Returns 1 when released, 0 when the grant was already gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
