-- Remove up to a limit of the leases whose deadline passed.
-- KEYS: leases, lease_owner, lease_since.
-- ARGV: the limit.
-- Returns the task keys whose lease expired, now removed (the master requeues their tasks).
-- Finding and removing in one step: a holder's renewal cannot land between the two, so a lease is either
-- renewed in time or reclaimed, never both.

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, key in ipairs(expired) do
  redis.call('ZREM', KEYS[1], key)
  redis.call('HDEL', KEYS[2], key)
  redis.call('ZREM', KEYS[3], key)
end
return expired
