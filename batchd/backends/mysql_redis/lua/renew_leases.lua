-- Push back the deadlines of the leases still held by their tokens.
-- KEYS: leases, lease_owner.
-- ARGV: the lease's length in ms, then key, token pairs.
-- Returns 1 / 0 per pair: renewed, or no longer ours (reclaimed, and perhaps leased again to another).
-- The owner is checked and the deadline moved in one step, so a lease reclaimed meanwhile is never revived.

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    -- XX: a renewal moves a deadline, it never makes a lease.
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
