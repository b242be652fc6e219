-- Make the leases still held by their tokens due at once (deadline 0), for the master's next patrol.
-- KEYS: leases, lease_owner.
-- ARGV: key, token pairs.
-- Returns how many leases were still owned, now due.
-- A worker stopping with tasks it will not finish gives them back so, instead of letting them wait out
-- their deadlines; the master reclaims them as it reclaims any expired lease.

local given = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], 'XX', 0, ARGV[i])
    given = given + 1
  end
end
return given
