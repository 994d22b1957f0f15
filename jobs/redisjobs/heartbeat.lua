-- Extends the deadline of every job whose epoch matches.
-- KEYS[1]: deadlines zset, KEYS[2..]: the jobs' hashes
-- ARGV[1]: lease ms, ARGV[2..]: id, epoch pairs in the order of KEYS[2..]
-- Returns the IDs whose epoch did not match (or that are gone).
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local lost = {}
for i = 2, #KEYS do
  local id, epoch = ARGV[2 * i - 2], ARGV[2 * i - 1]
  if redis.call('HGET', KEYS[i], 'epoch') == epoch then
    redis.call('HSET', KEYS[i], 'deadline', deadline)
    redis.call('ZADD', KEYS[1], deadline, id)
  else
    lost[#lost + 1] = id
  end
end
return lost
