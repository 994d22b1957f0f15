-- Counts the live waiters among at most 1000 entries of a key's queue
-- (KEYS[1]: the queue, KEYS[2]: the waiters' entries, "<deadline ms>|..."),
-- from the 0-based place ARGV[1]: those whose place has not lapsed (see
-- acquire.lua and handoff.lua). Read-only. Returns {live, 1 when the queue
-- goes on past these entries, else 0}: a long queue is counted by several
-- calls, so that none runs long.
local t = redis.call('TIME')
local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local from = tonumber(ARGV[1])
local ws = redis.call('ZRANGE', KEYS[1], from, from + 1000)
local n = 0
for i = 1, math.min(#ws, 1000) do
  local deadline = tonumber(string.match(redis.call('HGET', KEYS[2], ws[i]) or '', '^(%d+)|') or '0')
  if deadline >= nowMs then n = n + 1 end
end
if #ws > 1000 then return {n, 1} end
return {n, 0}
