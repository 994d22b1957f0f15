-- Renews each grant of a batch (lock.Batch.Renew) that is still its own,
-- as extend.lua renews one: the key holds the grant's value exactly.
-- KEYS: the lock keys (at most renewChunk, 1000, all of one Cluster slot).
-- ARGV[1]: ttl in ms, ARGV[1 + j]: key j's grant value.
-- Returns the indexes (1-based) of the keys whose grant is gone; the
-- others are renewed. MGET reads a key of another type as nil: gone.
local values = redis.call('MGET', unpack(KEYS))
local gone = {}
for j = 1, #KEYS do
  if values[j] == ARGV[1 + j] then
    redis.call('PEXPIRE', KEYS[j], ARGV[1])
  else
    gone[#gone + 1] = j
  end
end
return gone
