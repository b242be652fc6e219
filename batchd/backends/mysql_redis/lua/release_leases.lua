-- End the leases still held by their tokens; with five keys, also put their tasks back at the queue's tail.
-- KEYS: leases, lease_owner, lease_since, and to hand back, batch_pending and queued.
-- ARGV: key, token pairs to release, or key, token, payload triples to hand back.
-- Returns 1 / 0 per entry: done, or the lease no longer ours (left alone).
-- A write-back counts only if its lease was still its holder's here: a task reclaimed and leased again is
-- written back by its new holder alone.

-- One script serves both: a release and a hand-back differ only in where the task goes next.
local stride = #KEYS == 5 and 3 or 2
local out = {}
for i = 1, #ARGV, stride do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    if stride == 3 then
      -- Back in `queued` with its payload, so the master sees it waiting, not lost.
      redis.call('SADD', KEYS[5], ARGV[i])
      redis.call('RPUSH', KEYS[4], ARGV[i + 2])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
