-- Lists up to ARGV[1] dead jobs, the most recent first.
-- KEYS[1]: dead set zset. ARGV[1]: limit, ARGV[2]: dead job key prefix.
-- Returns a flat list: id, payload, owner, attempt, epoch, deadline, history, died, reason, ...
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[2] .. id, 'payload', 'owner', 'attempt', 'epoch', 'deadline', 'history', 'died', 'reason')
  if f[4] then
    out[#out + 1] = id
    for k = 1, 8 do out[#out + 1] = f[k] or '' end
  end
end
return out
