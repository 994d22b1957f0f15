-- Lists one page of at most ARGV[1] (listChunk) dead jobs, the most recent
-- first, from a cursor, without their payloads (an operator listing: they
-- never leave the server; DeadJob reads one dead job whole).
-- KEYS[1]: dead set zset. ARGV[1]: page size, ARGV[2]: dead job key prefix,
-- ARGV[3]: the cursor's score ('+inf' at first), ARGV[4]: the last member
-- the page before read ('' at first). The page goes on from that member's
-- rank, or from the first member of the cursor's score when it moved or is
-- gone, as expired.lua's do.
-- Returns {the next cursor's score, the last member read, members read,
-- then a flat list: id, owner, attempt, epoch, deadline, history, max
-- retries, died, reason, ...}
local n = tonumber(ARGV[1])
local page
if ARGV[4] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[4]) == ARGV[3] then
  local rank = redis.call('ZREVRANK', KEYS[1], ARGV[4])
  page = redis.call('ZREVRANGE', KEYS[1], rank + 1, rank + n, 'WITHSCORES')
else
  page = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', 0, n)
end
local last, member = ARGV[3], ARGV[4]
local out = {'', '', tostring(#page / 2)}
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  last, member = score, id
  local f = redis.call('HMGET', ARGV[2] .. id, 'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries', 'died', 'reason')
  if f[3] then
    out[#out + 1] = id
    for k = 1, 8 do out[#out + 1] = f[k] or '' end
  end
end
out[1], out[2] = last, member
return out
