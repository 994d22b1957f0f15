-- Extends the deadline of every job of one chunk whose epoch matches: at
-- most heartbeatChunk jobs (the Go side splits a heartbeat into chunks and
-- pipelines them), so that the script stays within about a millisecond or
-- two of server time.
-- KEYS[1]: deadlines zset, KEYS[2..]: the jobs' hashes
-- ARGV[1]: lease ms, ARGV[2..]: id, epoch pairs in the order of KEYS[2..]
-- Returns the IDs whose epoch did not match (or that are gone).
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local lost = {}
local index = {}
for i = 2, #KEYS do
  local id, epoch = ARGV[2 * i - 2], ARGV[2 * i - 1]
  if redis.call('HGET', KEYS[i], 'epoch') == epoch then
    redis.call('HSET', KEYS[i], 'deadline', deadline)
    index[#index + 1] = deadline
    index[#index + 1] = id
  else
    lost[#lost + 1] = id
  end
end
if #index > 0 then
  -- One ZADD for the chunk (its size keeps unpack within Lua's stack).
  redis.call('ZADD', KEYS[1], unpack(index))
end
return lost
