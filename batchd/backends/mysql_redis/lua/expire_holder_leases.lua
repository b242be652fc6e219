-- Make every lease whose token starts with a prefix due at once (deadline 0).
-- KEYS: leases, lease_owner.
-- ARGV: the token prefix (host:pid: of a worker process).
-- Returns how many leases held under it are now due.
-- The supervisor reaping a worker that died knows its host and pid, not its tokens: the prefix finds them.

local owners = redis.call('HGETALL', KEYS[2])
local prefix, given = ARGV[1], 0
for i = 1, #owners, 2 do
  if string.sub(owners[i + 1], 1, #prefix) == prefix then
    redis.call('ZADD', KEYS[1], 'XX', 0, owners[i])
    given = given + 1
  end
end
return given
