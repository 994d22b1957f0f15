-- Deletes a grant whoever holds it, or every share (KEYS[5], KEYS[6]: the
-- key's shares and their index, see shares.lua), and hands the key on (see
-- release.lua).
-- KEYS[1]: lock key, KEYS[2]: its fence counter, KEYS[3], KEYS[4]: its wait
-- queue and the waiters' entries. ARGV[1]: release channel, ARGV[2]: the
-- user's key, ARGV[3]: the fence counter's lifetime in ms.
-- Returns 1 when a grant was removed. The fence counter moves past the
-- evicted grant's token, so that its holder's Release reports the loss
-- (see release.lua), and the next token is larger however the server's
-- clock moves. A grant without a counter (a claim of ClaimEach, which
-- creates none, or one whose counter was lost) gets one, past its token,
-- for the counter's lifetime.
local v = redis.pcall('GET', KEYS[1])
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[5], KEYS[6])
  local f = tonumber(redis.call('GET', KEYS[2]) or '')
  local t = type(v) == 'string' and tonumber(string.match(v, '^(%d+)|') or '')
  if f and (not t or f >= t) then
    redis.call('SET', KEYS[2], string.format('%.0f', f + 1), 'KEEPTTL')
  elseif t and t > 0 then
    redis.call('SET', KEYS[2], string.format('%.0f', t + 1), 'PX', ARGV[3])
  end
  if not handoff(0, ARGV[2], ARGV[3]) then
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
  return 1
end
return 0
