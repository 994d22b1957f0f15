-- Releases many independent grants (lock.ReleaseEach), each as release.lua
-- releases one (releaseKey, release_key.lua): handed to the first live
-- waiter of its key's queue, or its release announced.
-- KEYS: lock key, fence counter, wait queue, waiters' entries of grant 1,
-- then of grant 2, ... (at most releaseChunk grants, all of one Cluster
-- slot). ARGV[1]: release channel, ARGV[2]: the fence counters' lifetime
-- in ms; ARGV[3j], ARGV[3j + 1], ARGV[3j + 2]: grant j's value, user's key
-- and token.
-- Returns releaseKey's outcome for each grant, in order: 1 (released), 2
-- (gone, no grant made since) or 0 (lost).
local out = {}
for j = 1, #KEYS / 4 do
  out[j] = releaseKey(4 * (j - 1), ARGV[3 * j], ARGV[1], ARGV[3 * j + 1], ARGV[3 * j + 2], ARGV[2])
end
return out
