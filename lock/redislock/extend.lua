-- Renews a grant if it is still ours.
-- KEYS[1]: lock key. ARGV[1]: the grant's value, ARGV[2]: ttl in ms.
-- Returns 1 when renewed, 0 when the grant is gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
