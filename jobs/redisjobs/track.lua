-- Records a started job with a fresh epoch, replacing any entry of its ID.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: epoch counter
-- ARGV: id, payload, owner, attempt, lease ms, history
-- Returns {epoch, deadline ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('INCR', KEYS[3])
local deadline = now + tonumber(ARGV[5])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'payload', ARGV[2], 'owner', ARGV[3], 'attempt', ARGV[4],
  'epoch', epoch, 'deadline', deadline, 'history', ARGV[6])
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
return {epoch, deadline}
