-- Lists up to ARGV[1] jobs whose deadline has passed, earliest first, with
-- the deadlines index: O(log n + expired). The jobs' hashes share the
-- index's hash tag, so they live on the same Cluster node.
-- KEYS[1]: deadlines zset. ARGV[1]: limit (0: all), ARGV[2]: job key prefix,
-- ARGV[3]: 1 to list every job instead, without payloads (InFlight: an
-- operator listing, whose payloads never leave the server).
-- Returns a flat list: id, payload, owner, attempt, epoch, deadline, history, max retries, ...
-- (InFlight: id, owner, attempt, epoch, deadline, history, max retries, ...).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = now
local fields = {'payload', 'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries'}
local epoch = 4 -- the index of 'epoch': present in every job
if ARGV[3] == '1' then
  max = '+inf'
  fields = {'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries'}
  epoch = 3
end
local ids
if tonumber(ARGV[1]) > 0 then
  ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', max, 'LIMIT', 0, tonumber(ARGV[1]))
else
  ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', max)
end
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[2] .. id, unpack(fields))
  if f[epoch] then
    out[#out + 1] = id
    for k = 1, #fields do out[#out + 1] = f[k] or '' end
  end
end
return out
