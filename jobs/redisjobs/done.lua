-- Completes a job: removes it if its epoch matches and leaves a marker of
-- the completion that expires after the done window, so that a retried Done
-- of the same epoch (its first reply lost) finds the marker and succeeds.
-- A completion drops the ID's retry record: the job's count ends with it.
-- KEYS[1]: job hash, KEYS[2]: deadlines zset, KEYS[3]: the completion
-- marker of this epoch, KEYS[4]: the ID's retry record. ARGV: id, epoch,
-- done window ms.
-- Returns 1 when removed or already completed, 0 when stale.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then
  return redis.call('EXISTS', KEYS[3])
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
redis.call('DEL', KEYS[4])
return 1
