-- Lease up to one pending task per token: pop its payload, drop its key from `queued`, give it a lease.
-- KEYS: batch_pending, queued, leases, lease_owner, paused, lease_since.
-- ARGV: the lease's length in ms, then one token per task wanted.
-- Returns the payloads taken (in list order), then the length of the list left.
-- One script, so that no task is ever popped without a lease: a worker that dies between the pop and the
-- lease would otherwise lose it, and the master could not tell it from a task still waiting.

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
-- A paused namespace has nothing to take, in the same step that would have taken it.
if redis.call('EXISTS', KEYS[5]) == 1 then return {redis.call('LLEN', KEYS[1])} end
-- Deadlines are on Redis's own clock, so that the hosts' clocks need not agree.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local taken = {}
for i = 2, #ARGV do
  local payload = redis.call('LPOP', KEYS[1])
  if not payload then break end
  local key = cjson.decode(payload)['key']
  redis.call('SREM', KEYS[2], key)
  redis.call('ZADD', KEYS[3], deadline, key)
  redis.call('HSET', KEYS[4], key, ARGV[i])
  -- When the lease was taken, which renewals keep: `batchd status --why` shows the oldest.
  redis.call('ZADD', KEYS[6], now, key)
  taken[#taken + 1] = payload
end
taken[#taken + 1] = redis.call('LLEN', KEYS[1])
return taken
