-- REQUEST_FILTER = "bloom": test fingerprints against a batch's scalable, blocked Bloom filter and add them, in
-- one step.
-- KEYS: bloom:<batch> (HASH capacity, error, layout, layers, and n<i>: the fingerprints added to layer i),
--       blooms (SET of the batch ids with a filter).
--       The layers are the bitmaps bloom:<batch>:0, :1, ... (named here from KEYS[1]: their number grows).
-- ARGV: the TTL in s; L - 1, the last of the L layers the caller knows; for each of them its blocks, k and holds
--       (bloom_geometry.py computes them); `verify`: '', or "capacity error layout batch" (the filter as the
--       caller knows it, or as it would make it, and the batch id), to compare them and the layers with the
--       filter's own first, and make the filter or its next layer if they are due; then the fingerprints (hex
--       digests: their first 24 digits are read). (Only what a common call needs is an argument of its own:
--       each costs the caller's client and Redis a little, at every request.)
-- Returns, for each fingerprint in turn, 1 when it is new (now added), 0 when the filter holds it (or takes it
-- for one it holds); for one fingerprint, that integer alone. When the caller must know other layers first (the last it knows is full, another caller
-- added one, the filter was made with other settings, or it is gone), the script stops there and returns
-- {-1 - L, capacity, error, layout, the answers given so far}: L the number of layers to learn (0: start
-- afresh), the next three the filter's own when a `verify` found them to differ (else nil). The caller learns
-- and calls again, with `verify`, for the rest. So a request that passes the filter costs one round trip, but
-- at a new layer.
--
-- A fingerprint's k bits are in one 512-bit block of a layer: the block is h1 modulo the layer's blocks, and the
-- bits are a + j x b (j < k) modulo 512, from h2 (a, and b odd so that the k bits differ). One GETRANGE reads
-- the block, and one SETRANGE writes it back when a bit was clear; bloom_geometry.py says why, and how the
-- layers are sized. (The common path, a filter of one layer that takes a new fingerprint, is the loop at the
-- end, with three redis.calls: GETRANGE, HINCRBY, SETRANGE. This script runs for every request a worker makes,
-- so it reads nothing else.)

local RENEW_EVERY = 1000
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local byte, sub, floor = string.byte, string.sub, math.floor

local meta, ttl, last_named = KEYS[1], ARGV[1], ARGV[2]      -- (names built from strings: no number printed)
local last = tonumber(last_named)
local known, verify = last + 1, ARGV[3 * last + 6]

local function layer_key(i) return meta .. ':' .. i end
local function layer_arg(i, field) return tonumber(ARGV[3 + 3 * i + field]) end     -- 0 blocks, 1 k, 2 holds

local function renew()
  redis.call('EXPIRE', meta, ttl)
  for i = 0, known - 1 do redis.call('EXPIRE', layer_key(i), ttl) end
end

local function learning(layers_to_learn, filter, answers)
  local reply = {-1 - layers_to_learn, filter[1] or false, filter[2] or false, filter[3] or false}
  for n = 1, #answers do reply[n + 4] = answers[n] end
  return reply
end

-- Whether the k bits at a + j x b of a 64-byte block are all set.
local function all_set(block, k, a, b)
  for j = 0, k - 1 do
    local bit_at = (a + j * b) % 512
    if band(byte(block, rshift(bit_at, 3) + 1) or 0, lshift(1, band(bit_at, 7))) == 0 then return false end
  end
  return true
end

if verify ~= '' then
  -- The filter's own state: made if it is new; its next layer made if the caller knows one more than it has and
  -- its last is full; else, if the caller's view differs from it, what the caller must learn.
  local caller = {string.match(verify, '^(%S+) (%S+) (%S+) (%S+)$')}
  local state = redis.call('HMGET', meta, 'capacity', 'error', 'layout', 'layers')
  if not state[1] then
    redis.call('HSET', meta, 'capacity', caller[1], 'error', caller[2], 'layout', caller[3], 'layers', 0)
    redis.call('SADD', KEYS[2], caller[4])
    state = {caller[1], caller[2], caller[3], '0'}
  end
  local made = tonumber(state[4])
  if state[1] ~= caller[1] or state[2] ~= caller[2] or state[3] ~= caller[3] then
    return learning(math.max(made, 1), state, {})
  end
  if known == made + 1 and (made == 0 or
      tonumber(redis.call('HGET', meta, 'n' .. (made - 1)) or 0) >= layer_arg(made - 1, 2)) then
    redis.call('SETBIT', layer_key(made), layer_arg(made, 0) * 512 - 1, 0)      -- allocated once, whole
    redis.call('HSET', meta, 'layers', known)
    renew()
  elseif known ~= made then
    return learning(math.max(made, 1), state, {})
  end
end

local at = 3 + 3 * last
local last_key, blocks, k, holds = meta .. ':' .. last_named, tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
  tonumber(ARGV[at + 2])
local counter = 'n' .. last_named
local answers = {}
for n = at + 4, #ARGV do
  local fingerprint = ARGV[n]
  local h1, h2 = tonumber(sub(fingerprint, 1, 12), 16), tonumber(sub(fingerprint, 13, 24), 16)
  local a, b = h2 % 512, bor(floor(h2 / 512) % 512, 1)
  local answer = nil
  for i = 0, last - 1 do                                   -- the full layers: tested only
    local start = h1 % layer_arg(i, 0) * 64
    if all_set(redis.call('GETRANGE', layer_key(i), start, start + 63), layer_arg(i, 1), a, b) then
      answer = 0
      break
    end
  end
  if answer == nil then
    local start = h1 % blocks * 64
    local block = redis.call('GETRANGE', last_key, start, start + 63)
    if block == '' then                                    -- dropped or expired: the caller starts afresh
      return learning(0, {}, answers)
    end
    -- The block's bytes with the fingerprint's bits set, tested as they are set (in one pass: most requests are
    -- new, and their block is then written back).
    local bytes, clear = {byte(block, 1, 64)}, false
    for j = 0, k - 1 do
      local bit_at = (a + j * b) % 512
      local index, mask = rshift(bit_at, 3) + 1, lshift(1, band(bit_at, 7))
      local was = bytes[index]
      if band(was, mask) == 0 then
        bytes[index], clear = was + mask, true
      end
    end
    if not clear then
      answer = 0
    else
      local added = redis.call('HINCRBY', meta, counter, 1)
      if added > holds then                                -- full: the next layer takes it
        redis.call('HINCRBY', meta, counter, -1)
        local made = tonumber(redis.call('HGET', meta, 'layers') or 0)
        return learning(math.max(made, known + 1), {}, answers)
      end
      redis.call('SETRANGE', last_key, start, string.char(unpack(bytes)))
      -- The filter outlives its batch by the TTL (its close drops it): renewed every RENEW_EVERY adds, as the
      -- exact filter's set is with each, so that a long batch keeps every layer.
      if added % RENEW_EVERY == 0 then renew() end
      answer = 1
    end
  end
  answers[#answers + 1] = answer
end
if #answers == 1 then return answers[1] end     -- (the worker's call: an integer is the cheapest reply to read)
return answers
