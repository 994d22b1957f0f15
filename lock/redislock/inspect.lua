-- Reports a grant: {value, remaining ttl in ms}, or {} when the key is free.
-- KEYS[1]: lock key.
local v = redis.call('GET', KEYS[1])
if not v then return {} end
return {v, redis.call('PTTL', KEYS[1])}
