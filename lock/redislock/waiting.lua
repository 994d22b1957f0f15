-- Counts the live waiters of a key's queue (KEYS[1]: the queue, KEYS[2]:
-- the waiters' entries, "<deadline ms>|..."): those whose place has not
-- lapsed (see acquire.lua and handoff.lua). Read-only.
local t = redis.call('TIME')
local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for _, w in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local deadline = tonumber(string.match(redis.call('HGET', KEYS[2], w) or '', '^(%d+)|') or '0')
  if deadline >= nowMs then n = n + 1 end
end
return n
