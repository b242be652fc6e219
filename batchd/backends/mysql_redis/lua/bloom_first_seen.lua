-- REQUEST_FILTER = "bloom": test fingerprints against a batch's scalable Bloom filter and add them, in one step.
-- KEYS: bloom:<batch> (HASH capacity, error, layers, count), blooms (SET of the batch ids with a filter).
--       The layers are the bitmaps bloom:<batch>:0, :1, ... (named here from KEYS[1]: their number grows).
-- ARGV: REQUEST_FILTER_CAPACITY, REQUEST_FILTER_ERROR_RATE, the TTL in s, the batch id, then for each fingerprint
--       h1, h2 (two 48-bit hashes of it). A filter keeps the capacity and error rate it was created with.
-- Returns, for each fingerprint in turn, 1 when it is new (now added), 0 when the filter holds it (or takes it
-- for one it holds). The worker sends one fingerprint a call; bench/dedup.py fills a filter with thousands.
--
-- Layer i holds capacity x 2^i fingerprints at an error rate of error / 2^(i+1), so that the rates of every
-- layer add up to less than `error` however many there are: past a layer's capacity the next layer is made,
-- never a fuller one with more false positives. Its k bits are h1 + j x h2 (j < k) modulo its size
-- (Kirsch and Mitzenmacher's double hashing); a bitmap is made whole at once (SETBIT on its last bit), so
-- Redis allocates it once, at its size.

local MAX_BITS = 4294967296          -- SETBIT's offsets stop at 2^32: a layer that large holds fewer
local LN2 = math.log(2)
local RENEW_EVERY = 1000

local meta, ttl = KEYS[1], ARGV[3]
local state = redis.call('HMGET', meta, 'capacity', 'error', 'layers', 'count')
local capacity, error_rate = tonumber(state[1]), tonumber(state[2])
local layers, count = tonumber(state[3]), tonumber(state[4])
local added, grown = 0, false

-- Layer i: its key, its size in bits, its number of hashes, and how many fingerprints it takes.
local geometries = {}
local function geometry(i)
  local known = geometries[i]
  if known then return known end
  local rate = error_rate / 2 ^ (i + 1)
  local bits_each = -math.log(rate) / (LN2 * LN2)
  local holds = capacity * 2 ^ i
  local bits = math.ceil(holds * bits_each)
  if bits > MAX_BITS then
    bits = MAX_BITS
    holds = math.floor(bits / bits_each)
  end
  known = {key = meta .. ':' .. i, bits = bits, k = math.max(1, math.floor(-math.log(rate) / LN2 + 0.5)),
           holds = holds}
  geometries[i] = known
  return known
end

local function make_layer(i)
  local layer = geometry(i)
  redis.call('SETBIT', layer.key, layer.bits - 1, 0)
  redis.call('EXPIRE', layer.key, ttl)
end

-- Whether the fingerprint's k bits of layer i are all set; GETBIT tests them (stopping at the first clear
-- one), SETBIT sets them all as it tests. (One call a bit: a BITFIELD of the k bits measured no faster here.)
local function all_set(i, op, h1, h2)
  local layer = geometry(i)
  local key, bits, found = layer.key, layer.bits, true
  for j = 0, layer.k - 1 do
    local offset = math.fmod(h1 + j * h2, bits)     -- (exact: h1 + j x h2 stays below 2^53)
    if op == 'GETBIT' then
      if redis.call('GETBIT', key, offset) == 0 then return false end
    elseif redis.call('SETBIT', key, offset, 1) == 0 then
      found = false
    end
  end
  return found
end

local function first_seen(h1, h2)
  if count >= geometry(layers - 1).holds then      -- the last layer is full: a new one, when it is needed
    make_layer(layers)
    layers, count, grown = layers + 1, 0, true
  end
  for i = 0, layers - 2 do
    if all_set(i, 'GETBIT', h1, h2) then return 0 end
  end
  if all_set(layers - 1, 'SETBIT', h1, h2) then
    return 0        -- (its bits were all set already: setting them changed nothing)
  end
  count, added = count + 1, added + 1
  return 1
end

if layers == nil then
  capacity, error_rate, layers, count = tonumber(ARGV[1]), tonumber(ARGV[2]), 1, 0
  redis.call('HSET', meta, 'capacity', ARGV[1], 'error', ARGV[2])
  redis.call('SADD', KEYS[2], ARGV[4])
  make_layer(0)
end
local before = count
local answers = {}
for n = 5, #ARGV, 2 do
  answers[#answers + 1] = first_seen(tonumber(ARGV[n]), tonumber(ARGV[n + 1]))
end
if added > 0 or grown or before == 0 then
  redis.call('HSET', meta, 'layers', layers, 'count', count)
  -- The filter outlives its batch by the TTL (its close drops it): renewed every RENEW_EVERY adds, as the exact
  -- filter's set is with each, so a long batch keeps every layer.
  if grown or before == 0 or math.floor(count / RENEW_EVERY) ~= math.floor(before / RENEW_EVERY) then
    redis.call('EXPIRE', meta, ttl)
    for i = 0, layers - 1 do redis.call('EXPIRE', geometry(i).key, ttl) end
  end
end
return answers
