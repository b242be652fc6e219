-- Count one more lease attempt of each task in this batch.
-- KEYS: attempts.
-- ARGV: task keys.
-- Returns each one's attempts in this batch, this one counted.
-- One script rather than a pipeline of HINCRBYs: the master sends one command of N arguments instead of N
-- commands.

local out = {}
for i = 1, #ARGV do
  out[i] = redis.call('HINCRBY', KEYS[1], ARGV[i], 1)
end
return out
