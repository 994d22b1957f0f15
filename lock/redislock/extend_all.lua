-- Renews every key of a group (Group.Extend) that is still its own.
-- KEYS: the lock keys. ARGV[1]: ttl in ms, ARGV[1 + j]: key j's value.
-- Returns how many of the keys were gone (0: all renewed).
local gone = 0
for j = 1, #KEYS do
  if redis.call('GET', KEYS[j]) == ARGV[1 + j] then
    redis.call('PEXPIRE', KEYS[j], ARGV[1])
  else
    gone = gone + 1
  end
end
return gone
