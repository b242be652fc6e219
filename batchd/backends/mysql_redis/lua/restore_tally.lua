-- Restore a batch's tally lost with Redis, unless it is held.
-- KEYS: tally:<batch>.
-- ARGV: done, failed (the batch record's counts), the TTL in s.
-- Returns 0.
-- Write-backs may have added to the lost tally since Redis came back: the record's counts are added to
-- theirs, and `held` marks it whole again, so a second restore adds nothing.

if redis.call('HEXISTS', KEYS[1], 'held') == 0 then
  redis.call('HINCRBY', KEYS[1], 'done', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'failed', ARGV[2])
  redis.call('HSET', KEYS[1], 'held', 1)
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 0
