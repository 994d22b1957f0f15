-- Deletes a dead job, and the retry record of its ID with it; or, given
-- an epoch, the dead job buried at it alone (a retry record is then of a
-- later life of the job: Bury dropped the one before).
-- KEYS[1]: dead job hash, KEYS[2]: dead set zset, KEYS[3]: the ID's retry record.
-- ARGV[1]: id; ARGV[2]: the epoch the dead job must have been buried at,
-- or "" for any. Returns 1 when deleted, 0 when there was none
-- (nothing is deleted).
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
local n = redis.call('DEL', KEYS[1])
if n == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if ARGV[2] == '' then redis.call('DEL', KEYS[3]) end
end
return n
