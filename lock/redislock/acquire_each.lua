-- Makes many independent TryAcquireAny (lock.TryAcquireAnyEach), each as
-- acquire.lua makes one over several keys (anyOf, any_of.lua), in order:
-- a key granted to one request is held for the next. Prepended with
-- clock.lua and any_of.lua.
-- KEYS: the first request's lock key 1, fence key 1, lock key 2, fence
-- key 2, ..., then the next request's, and so on (at most anyEachKeys
-- keys of the user's, or one request of up to scriptKeys; all of one
-- Cluster slot).
-- ARGV[1]: the fence counters' lifetime in ms; then four per request: its
-- number of keys, "<attempt>|<owner>" (an attempt id of its own), its ttl
-- in ms and its start offset (0-based).
-- Returns one entry per request, anyOf's reply. A failed write (out of
-- memory) ends the script with its error: the grants made so far lapse
-- with their ttl.
local since, now = clock()
local out = {}
local base = 0
for r = 0, (#ARGV - 1) / 4 - 1 do
  local n = tonumber(ARGV[4 * r + 2])
  out[r + 1] = anyOf(base, n, ARGV[4 * r + 3], ARGV[4 * r + 4], tonumber(ARGV[4 * r + 5]), ARGV[1], since, now)
  base = base + 2 * n
end
return out
