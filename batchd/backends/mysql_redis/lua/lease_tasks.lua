-- Lease up to one pending task per token: pop its payload, drop its key from `queued`, give it a lease.
-- KEYS: batch_pending, queued, leases, lease_owner, paused, lease_since.
-- ARGV: the lease's length in ms, then one token per task wanted.
-- Returns the payloads taken (in list order), then the length of the list left.
-- One script, so that no task is ever popped without a lease: a worker that dies between the pop and the
-- lease would otherwise lose it, and the master could not tell it from a task still waiting.
-- One command per key for all the tasks taken, not one per task (LRANGE and LTRIM rather than LPOP's
-- count, which servers older than 6.2 lack).

-- A call takes at most a few thousand arguments (Lua's stack): a long list goes in parts.
local PART = 1000
local function in_parts(head, members)
  for first = 1, #members, PART do
    local args = {unpack(head)}
    for i = first, math.min(first + PART - 1, #members) do args[#args + 1] = members[i] end
    redis.call(unpack(args))
  end
end

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
-- A paused namespace has nothing to take, in the same step that would have taken it.
if redis.call('EXISTS', KEYS[5]) == 1 or #ARGV < 2 then return {redis.call('LLEN', KEYS[1])} end
local taken = redis.call('LRANGE', KEYS[1], 0, #ARGV - 2)
if #taken == 0 then return {0} end
redis.call('LTRIM', KEYS[1], #taken, -1)
-- Deadlines are on Redis's own clock, so that the hosts' clocks need not agree.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local keys, deadlines, owners, since = {}, {}, {}, {}
for n, payload in ipairs(taken) do
  local key = cjson.decode(payload)['key']
  keys[n] = key
  deadlines[2 * n - 1], deadlines[2 * n] = deadline, key
  owners[2 * n - 1], owners[2 * n] = key, ARGV[n + 1]
  -- When the lease was taken, which renewals keep: `batchd status --why` shows the oldest.
  since[2 * n - 1], since[2 * n] = now, key
end
in_parts({'SREM', KEYS[2]}, keys)
in_parts({'ZADD', KEYS[3]}, deadlines)
in_parts({'HSET', KEYS[4]}, owners)
in_parts({'ZADD', KEYS[6]}, since)
taken[#taken + 1] = redis.call('LLEN', KEYS[1])
return taken
