-- Lists one page of at most ARGV[1] (listChunk) jobs of the deadline index,
-- earliest deadline first, from a cursor: the expired ones (Expired, whole)
-- or every one (InFlight, without payloads: an operator listing, whose
-- payloads never leave the server). O(log n + page) for n tracked. The
-- jobs' hashes share the index's hash tag, so they live on the same
-- Cluster node.
-- KEYS[1]: deadlines zset. ARGV[1]: page size, ARGV[2]: job key prefix,
-- ARGV[3]: 1 to list every job instead of the expired ones, ARGV[4]: the
-- cursor's score ('-inf' at first), ARGV[5]: how many members of that
-- score the pages before listed.
-- Returns {the next cursor's score, its count, members read, then a flat
-- list: id, payload, owner, attempt, epoch, deadline, history, max retries, ...}
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
local page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[4], max, 'WITHSCORES', 'LIMIT', tonumber(ARGV[5]), tonumber(ARGV[1]))
local last, same = ARGV[4], tonumber(ARGV[5])
local out = {'', '', tostring(#page / 2)}
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  if score == last then same = same + 1 else last, same = score, 1 end
  local f = redis.call('HMGET', ARGV[2] .. id, unpack(fields))
  if f[epoch] then
    out[#out + 1] = id
    for k = 1, #fields do out[#out + 1] = f[k] or '' end
  end
end
out[1], out[2] = last, tostring(same)
return out
