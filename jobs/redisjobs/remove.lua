-- Removes a job if its epoch matches (the recoverer, after a requeue) and
-- leaves its retry record — attempt, history, max retries — for the next
-- Track of its ID, expiring after the retry window.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: the ID's retry record.
-- ARGV: id, epoch, retry window ms.
-- Returns 1 when removed, 0 when stale.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
local f = redis.call('HMGET', KEYS[1], 'attempt', 'history', 'maxretries')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'attempt', f[1] or '0', 'history', f[2] or '', 'maxretries', f[3] or '0')
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1
