-- A top-up of a Redisson lock (topup.go): the owner's field ARGV[1] gets
-- the hold count ARGV[3] of the quorum that granted it, where the hash
-- KEYS[1] is absent (with a TTL of ARGV[2] ms, the validity the lock has
-- left), or where the owner's field counts fewer holds (the backend missed
-- one; its TTL is the owner's already). Nothing anywhere else: another
-- owner's hash, or a key of another type. 1 done, 0 not.
local kind = redis.call("type", KEYS[1])["ok"]
if kind == "none" then
	redis.call("hset", KEYS[1], ARGV[1], ARGV[3])
	redis.call("pexpire", KEYS[1], ARGV[2])
	return 1
end
if kind == "hash" then
	local have = tonumber(redis.call("hget", KEYS[1], ARGV[1]))
	if have and have < tonumber(ARGV[3]) then
		redis.call("hset", KEYS[1], ARGV[1], ARGV[3])
		return 1
	end
end
return 0
