-- Moves a job to the dead set if its epoch matches (the dead job has its
-- count: the ID's retry record goes).
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: dead job hash, KEYS[4]: dead set zset,
-- KEYS[5]: the ID's retry record
-- ARGV: id, epoch, reason. Returns 1 when buried, 0 when stale.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], unpack(f))
redis.call('HSET', KEYS[3], 'died', now, 'reason', ARGV[3])
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[5])
return 1
