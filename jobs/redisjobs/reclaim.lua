-- Takes an expired job over if its epoch matches and it is still expired.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: epoch counter
-- ARGV: id, epoch, new owner, lease ms, history record separator, field separator
-- Returns {payload, owner, attempt, epoch, deadline, history, max retries} or {} when stale.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[1], 'epoch', 'deadline', 'owner', 'attempt', 'history', 'payload', 'maxretries')
if f[1] ~= ARGV[2] or (tonumber(f[2]) or 0) > now then return {} end
local epoch = redis.call('INCR', KEYS[3])
local attempt = (tonumber(f[4]) or 0) + 1
local deadline = now + tonumber(ARGV[4])
local record = now .. ARGV[6] .. (f[3] or '') .. ARGV[6] .. ARGV[3] .. ARGV[6] .. attempt
local history = f[5] or ''
if history == '' then history = record else history = history .. ARGV[5] .. record end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'deadline', deadline, 'owner', ARGV[3], 'attempt', attempt, 'history', history)
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
return {f[6] or '', ARGV[3], tostring(attempt), tostring(epoch), tostring(deadline), history, f[7] or '0'}
