-- Lists one page of at most ARGV[1] (listChunk) jobs of the deadline index,
-- earliest deadline first, from a cursor: the expired ones (Expired, whole)
-- or every one (InFlight, without payloads: an operator listing, whose
-- payloads never leave the server). O(log n + page) for n tracked. The
-- jobs' hashes share the index's hash tag, so they live on the same
-- Cluster node.
-- KEYS[1]: deadlines zset. ARGV[1]: page size, ARGV[2]: job key prefix,
-- ARGV[3]: 1 to list every job instead of the expired ones, ARGV[4]: the
-- cursor's score ('-inf' at first), ARGV[5]: the last member the page
-- before read ('' at first).
-- The page goes on from the rank of that member when it still has the
-- cursor's score: every member after it in the index's order, whatever
-- left the index before it. When it moved or is gone, the page goes on
-- from the first member of the cursor's score, and lists again those of
-- them the pages before listed (the client drops repeats): an offset
-- into that score's members would skip one that never changed once
-- another of them, listed before, left.
-- Returns {the next cursor's score, the last member read, members read,
-- then a flat list: id, payload, owner, attempt, epoch, deadline, history,
-- max retries, ...} (InFlight: id, owner, attempt, epoch, deadline,
-- history, max retries, ...).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = now
local fields = {'payload', 'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries'}
local epoch = 4 -- the index of 'epoch': present in every job
if ARGV[3] == '1' then
  max = nil
  fields = {'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries'}
  epoch = 3
end
local n = tonumber(ARGV[1])
local page
if ARGV[5] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[5]) == ARGV[4] then
  local rank = redis.call('ZRANK', KEYS[1], ARGV[5])
  page = redis.call('ZRANGE', KEYS[1], rank + 1, rank + n, 'WITHSCORES')
else
  page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[4], max or '+inf', 'WITHSCORES', 'LIMIT', 0, n)
end
local last, member, read = ARGV[4], ARGV[5], 0
local out = {'', '', ''}
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  if max and tonumber(score) > max then break end
  last, member, read = score, id, read + 1
  local f = redis.call('HMGET', ARGV[2] .. id, unpack(fields))
  if f[epoch] then
    out[#out + 1] = id
    for k = 1, #fields do out[#out + 1] = f[k] or '' end
  end
end
out[1], out[2], out[3] = last, member, tostring(read)
return out
