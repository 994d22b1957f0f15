-- Releases one grant (releaseKey, release_key.lua).
-- KEYS[1]: lock key, KEYS[2]: its fence counter, KEYS[3], KEYS[4]: its wait
-- queue and the waiters' entries. ARGV[1]: the grant's value, ARGV[2]:
-- release channel, ARGV[3]: the user's key (the message), ARGV[4]: the
-- grant's token, ARGV[5]: the fence counter's lifetime in ms.
-- Returns releaseKey's 1 (released), 2 (gone, no grant made since) or 0
-- (lost).
return releaseKey(0, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
