-- Apply a worker's flush of a batch's counters, once.
-- KEYS: stats:<batch>, stats_flushes:<batch>, hosts:<batch>.
-- ARGV: the worker, the flush's number, the TTL in s, the hosts' counts (JSON {host: {field: n}}), the cap
--       on the hosts kept, the name of the others' entry, then counter name, n pairs.
-- Returns 1 when applied, 0 when it was already.
-- A flush whose answer was lost (an outage mid-call) is sent again: its number, checked and recorded in
-- the same step as the additions, keeps it from counting twice.

local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= last then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for i = 7, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
-- A host the table has is added to; a new one beyond the cap goes to the others' entry (hosts/counts.py),
-- so that a crawl of a million hosts keeps a table of a few hundred.
local cap, other = tonumber(ARGV[5]), ARGV[6]
for host, fields in pairs(cjson.decode(ARGV[4])) do
  if redis.call('HEXISTS', KEYS[3], host) == 0 then
    local held = redis.call('HLEN', KEYS[3]) - redis.call('HEXISTS', KEYS[3], other)
    if host == other or held >= cap then
      host = other
    end
  end
  local kept = redis.call('HGET', KEYS[3], host)
  local counts = kept and cjson.decode(kept) or {}
  for field, n in pairs(fields) do
    counts[field] = (counts[field] or 0) + n
  end
  redis.call('HSET', KEYS[3], host, cjson.encode(counts))
end
for i = 1, 3 do
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return 1
