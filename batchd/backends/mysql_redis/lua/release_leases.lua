-- End the leases still held by their tokens; with five keys, also put their tasks back at the queue's tail.
-- KEYS: leases, lease_owner, lease_since, and to hand back, batch_pending and queued.
-- ARGV: key, token pairs to release, or key, token, payload triples to hand back.
-- Returns the positions (1 for the first entry) of the entries whose lease was no longer ours (left
-- alone): an empty list when every one was ended.
-- A write-back counts only if its lease was still its holder's here: a task reclaimed and leased again is
-- written back by its new holder alone.
-- One command per key for all the entries (HMGET, HDEL, ZREM...), not one per entry.

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

-- One script serves both: a release and a hand-back differ only in where the task goes next.
local stride = #KEYS == 5 and 3 or 2
local asked = {}
for i = 1, #ARGV, stride do asked[#asked + 1] = ARGV[i] end
local owners = in_parts({'HMGET', KEYS[2]}, asked)
local ended, payloads, seen, lost = {}, {}, {}, {}
for n, key in ipairs(asked) do
  local i = (n - 1) * stride + 1
  -- A key named twice is ended once: its second entry finds it no longer held, as it would one by one.
  if owners[n] == ARGV[i + 1] and not seen[key] then
    seen[key] = true
    ended[#ended + 1] = key
    if stride == 3 then payloads[#payloads + 1] = ARGV[i + 2] end
  else
    lost[#lost + 1] = n
  end
end
if #ended > 0 then
  in_parts({'HDEL', KEYS[2]}, ended)
  in_parts({'ZREM', KEYS[1]}, ended)
  in_parts({'ZREM', KEYS[3]}, ended)
  if stride == 3 then
    -- Back in `queued` with its payload, so the master sees it waiting, not lost.
    in_parts({'SADD', KEYS[5]}, ended)
    in_parts({'RPUSH', KEYS[4]}, payloads)
  end
end
return lost
