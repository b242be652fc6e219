-- One step of a host's breaker, shared by every worker of the namespace.
-- KEYS: breaker:<host>, breakers (the index of records, for display).
-- ARGV: the step, now (Unix s), the step's arguments, then the index's cap, the record's TTL in s, the host.
-- Returns the step's answer (1: a trip opened the breaker, a claim won the probe, a say_down was the first
-- of its batch; else 0), then the record's FIELDS (none: no record, the breaker closed).
-- The same steps as hosts/breakers.py breaker_step(), which the memory and SQLite backends run under a lock:
-- here the record is read, stepped and written in one script, so the workers see one story.

-- The record's fields, in the order they are returned: hosts/breakers.py FIELDS, which a test holds equal.
local FIELDS = {'phase', 'since', 'failures', 'wait', 'next_probe', 'probe_until', 'not_before', 'down', 'said'}

local step, now = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local r = {phase = 'closed', since = 0, failures = 0, wait = 0, next_probe = 0, probe_until = 0, not_before = 0,
           down = 0, said = ''}
local had = #f > 0
for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
for _, k in ipairs({'since', 'failures', 'wait', 'next_probe', 'probe_until', 'not_before', 'down'}) do
  r[k] = tonumber(r[k])
end
local answer = 0
if step == 'hold_off' then
  r.not_before = math.max(r.not_before, tonumber(ARGV[3]))
elseif step == 'trip' then
  if r.phase == 'closed' then
    r.phase, r.since, r.failures = 'open', now, tonumber(ARGV[3])
    r.wait = tonumber(ARGV[4])
    r.next_probe = now + r.wait
    answer = 1
  else
    r.failures = r.failures + tonumber(ARGV[3])
  end
elseif r.phase == 'closed' then
  -- Nothing to step on a closed breaker: say the record as it is (a hold_off's), and write nothing.
  if not had then return {0} end
  local out = {0}
  for _, k in ipairs(FIELDS) do out[#out + 1] = tostring(r[k]) end
  return out
elseif step == 'claim' then
  -- One probe at a time; a claim lapses at probe_until, so a probe whose worker died is claimed again.
  if math.max(r.next_probe, r.not_before) <= now and not (r.phase == 'probing' and r.probe_until > now) then
    r.phase, r.probe_until = 'probing', now + tonumber(ARGV[3])
    answer = 1
  end
elseif step == 'probe_failed' then
  r.wait = math.min(r.wait * 2, tonumber(ARGV[3]))
  r.phase, r.failures, r.next_probe, r.probe_until = 'open', r.failures + 1, now + r.wait, 0
elseif step == 'release' then
  if r.phase == 'probing' then r.phase, r.probe_until = 'open', 0 end
elseif step == 'say_down' then
  if r.said ~= ARGV[3] then answer = 1 end
  r.down, r.said = 1, ARGV[3]
end
local out, flat = {answer}, {}
for _, k in ipairs(FIELDS) do
  -- %.17g: a time goes back to Python as the same float it came as.
  local v = k == 'phase' and r[k] or (k == 'said' and r[k] or string.format('%.17g', r[k]))
  out[#out + 1] = v
  flat[#flat + 1] = k
  flat[#flat + 1] = v
end
redis.call('HSET', KEYS[1], unpack(flat))
redis.call('EXPIRE', KEYS[1], ARGV[#ARGV - 1])
-- The index keeps the most recently changed hosts, at most the cap: the stalest goes first.
redis.call('ZADD', KEYS[2], now, ARGV[#ARGV])
if redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[#ARGV - 2]) then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, 0)
end
return out
