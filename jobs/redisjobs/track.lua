-- Records a started job with a fresh epoch, replacing any entry of its ID,
-- and takes over the count of that entry or of the ID's retry record
-- (which it consumes): its attempt and history unless the caller's attempt
-- is higher, its max retries unless the caller gives its own.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: epoch counter,
-- KEYS[4]: the ID's retry record
-- ARGV: id, payload, owner, attempt, lease ms, history, max retries
-- Returns {epoch, deadline ms, attempt, max retries, history}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local attempt, history, maxr = tonumber(ARGV[4]), ARGV[6], tonumber(ARGV[7])
local prior = redis.call('HMGET', KEYS[1], 'attempt', 'history', 'maxretries', 'epoch')
if not prior[4] then
  prior = redis.call('HMGET', KEYS[4], 'attempt', 'history', 'maxretries')
end
redis.call('DEL', KEYS[4])
if prior[1] then
  local a = tonumber(prior[1]) or 0
  if a >= attempt then attempt, history = a, prior[2] or '' end
  if maxr == 0 then maxr = tonumber(prior[3]) or 0 end
end
local epoch = redis.call('INCR', KEYS[3])
local deadline = now + tonumber(ARGV[5])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'payload', ARGV[2], 'owner', ARGV[3], 'attempt', attempt,
  'epoch', epoch, 'deadline', deadline, 'history', history, 'maxretries', maxr)
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
return {tostring(epoch), tostring(deadline), tostring(attempt), tostring(maxr), history}
