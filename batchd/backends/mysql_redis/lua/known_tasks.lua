-- Which tasks the queue knows, waiting or leased.
-- KEYS: queued, leases.
-- ARGV: task keys.
-- Returns 1 / 0 per key: queued or leased, or unknown.
-- Both are read in one step: a task moving from the list to a lease meanwhile is seen in one of them, so
-- the master never takes it for lost.

local out = {}
for i = 1, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 1 or redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
