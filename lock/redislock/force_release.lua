-- Deletes a grant whoever holds it, or every share (KEYS[5], KEYS[6]: the
-- key's shares and their index, see shares.lua), and hands the key on (see
-- release.lua).
-- KEYS[1]: lock key, KEYS[2]: its fence counter, KEYS[3], KEYS[4]: its wait
-- queue and the waiters' entries. ARGV[1]: release channel, ARGV[2]: the
-- user's key, ARGV[3]: the fence counter's lifetime in ms.
-- Returns 1 when a grant was removed. The fence counter moves past the
-- evicted grant's token, so that its holder's Release reports the loss
-- (see release.lua); the next token is larger anyway.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[5], KEYS[6])
  local f = redis.call('GET', KEYS[2])
  if f then
    redis.call('SET', KEYS[2], string.format('%.0f', tonumber(f) + 1), 'KEEPTTL')
  end
  if not handoff(0, ARGV[2], ARGV[3]) then
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
  return 1
end
return 0
