-- Deletes a dead job. KEYS[1]: dead job hash, KEYS[2]: dead set zset. ARGV[1]: id.
-- Returns 1 when deleted, 0 when there was none.
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
