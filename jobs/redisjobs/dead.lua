-- Lists one page of at most ARGV[1] (listChunk) dead jobs, the most recent
-- first, from a cursor, without their payloads (an operator listing: they
-- never leave the server; DeadJob reads one dead job whole).
-- KEYS[1]: dead set zset. ARGV[1]: page size, ARGV[2]: dead job key prefix,
-- ARGV[3]: the cursor's score ('+inf' at first), ARGV[4]: how many members
-- of that score the pages before listed.
-- Returns {the next cursor's score, its count, members read, then a flat
-- list: id, owner, attempt, epoch, deadline, history, max retries, died, reason, ...}
local page = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', tonumber(ARGV[4]), tonumber(ARGV[1]))
local last, same = ARGV[3], tonumber(ARGV[4])
local out = {'', '', tostring(#page / 2)}
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  if score == last then same = same + 1 else last, same = score, 1 end
  local f = redis.call('HMGET', ARGV[2] .. id, 'owner', 'attempt', 'epoch', 'deadline', 'history', 'maxretries', 'died', 'reason')
  if f[3] then
    out[#out + 1] = id
    for k = 1, 8 do out[#out + 1] = f[k] or '' end
  end
end
out[1], out[2] = last, tostring(same)
return out
