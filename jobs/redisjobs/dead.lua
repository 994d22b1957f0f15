-- Lists up to ARGV[1] dead jobs, the most recent first, without their
-- payloads (an operator listing: they never leave the server; DeadJob
-- reads one dead job whole).
-- KEYS[1]: dead set zset. ARGV[1]: limit, ARGV[2]: dead job key prefix.
-- Returns a flat list: id, owner, attempt, epoch, deadline, history, max retries, died, reason, ...
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[2] .. id, 'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries', 'died', 'reason')
  if f[3] then
    out[#out + 1] = id
    for k = 1, 8 do out[#out + 1] = f[k] or '' end
  end
end
return out
