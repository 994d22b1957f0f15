-- Removes a job if its epoch matches (Done, Remove).
-- KEYS[1]: job hash, KEYS[2]: deadlines zset. ARGV: id, epoch.
-- Returns 1 when removed, 0 when stale.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
