-- Releases every key of a group (Group.Release) that is still its own, as
-- release.lua does one key (releaseKey, release_key.lua): each is handed
-- to the first live waiter of its queue (handoff.lua) or its release
-- announced.
-- KEYS: lock key, fence counter, wait queue, waiters' entries of key 1,
-- then of key 2, ... ARGV[1]: release channel, ARGV[2]: the fence
-- counters' lifetime in ms; ARGV[3j], ARGV[3j + 1], ARGV[3j + 2]: key j's
-- value, user's key and token.
-- Returns {lost, gone}: how many keys a newer grant holds, and how many
-- are gone with no grant made since (an expiry, or a retried release).
local lost, gone = 0, 0
for j = 1, #KEYS / 4 do
  local r = releaseKey(4 * (j - 1), ARGV[3 * j], ARGV[1], ARGV[3 * j + 1], ARGV[3 * j + 2], ARGV[2])
  if r == 2 then
    gone = gone + 1
  elseif r == 0 then
    lost = lost + 1
  end
end
return {lost, gone}
