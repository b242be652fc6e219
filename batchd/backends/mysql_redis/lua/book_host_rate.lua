-- Book the next start of a request to a host under DOMAIN_RATE_LIMIT, for every worker of the namespace.
-- KEYS: rate:<host> (the host's next theoretical arrival, in ms of Redis's clock).
-- ARGV: the interval between requests and the burst's credit, both in ms.
-- Returns the wait before starting, in ms (a string: Lua would truncate a number to an integer).
-- The generic cell rate algorithm, the same arithmetic as hosts/rates.py booked_start(): one key per host,
-- read and written in one step, so two workers never book the same start.

-- TIME makes the script non-deterministic: replicate its writes, not the script (Redis < 5).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local theoretical = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now)
local start = math.max(now, theoretical - tonumber(ARGV[2]))
local next_arrival = theoretical + tonumber(ARGV[1])
-- The key outlives the next arrival by a second: an idle host's key goes by itself.
redis.call('SET', KEYS[1], tostring(next_arrival), 'PX', math.ceil(next_arrival - now) + 1000)
return tostring(start - now)
