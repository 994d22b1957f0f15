-- KEYS[1]: deadlines zset, KEYS[2]: dead set zset. Returns {tracked, expired, dead}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now), redis.call('ZCARD', KEYS[2])}
