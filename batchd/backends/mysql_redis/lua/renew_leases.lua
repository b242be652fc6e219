-- Push back the deadlines of the leases still held by their tokens.
-- KEYS: leases, lease_owner.
-- ARGV: the lease's length in ms, then key, token pairs.
-- Returns the positions (1 for the first pair) of the pairs no longer ours (reclaimed, and perhaps leased
-- again to another): an empty list when every lease was renewed.
-- The owner is checked and the deadline moved in one step, so a lease reclaimed meanwhile is never revived.
-- One command per key for all the pairs (HMGET, then one ZADD), not one per pair.

-- A call takes at most a few thousand arguments (Lua's stack): a long list goes in parts.
local PART = 1000
local function in_parts(head, members)
  local answers = {}
  for first = 1, #members, PART do
    local args = {unpack(head)}
    for i = first, math.min(first + PART - 1, #members) do args[#args + 1] = members[i] end
    local answer = redis.call(unpack(args))
    if type(answer) == 'table' then
      for _, value in ipairs(answer) do answers[#answers + 1] = value end
    end
  end
  return answers
end

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local keys = {}
for i = 2, #ARGV, 2 do keys[#keys + 1] = ARGV[i] end
local owners = in_parts({'HMGET', KEYS[2]}, keys)
local moved, lost = {}, {}
for n, key in ipairs(keys) do
  if owners[n] == ARGV[2 * n + 1] then
    moved[#moved + 1] = deadline
    moved[#moved + 1] = key
  else
    lost[#lost + 1] = n
  end
end
-- XX: a renewal moves a deadline, it never makes a lease.
in_parts({'ZADD', KEYS[1], 'XX'}, moved)
return lost
