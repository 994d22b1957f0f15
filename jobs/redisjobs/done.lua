-- Completes a job: removes it if its epoch matches and leaves a marker of
-- the completion that expires after the done window, so that a retried Done
-- of the same epoch (its first reply lost) finds the marker and succeeds.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: the completion
-- marker of this epoch. ARGV: id, epoch, done window ms.
-- Returns 1 when removed or already completed, 0 when stale.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then
  return redis.call('EXISTS', KEYS[3])
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return 1
