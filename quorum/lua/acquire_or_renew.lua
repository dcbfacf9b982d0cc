-- Take the key for ARGV[1] with TTL ARGV[3] ms, or renew it with ARGV[1]
-- when the value held starts with the same first ARGV[2] bytes: 2 when
-- taken, 1 when renewed (an undecided outcome undoes only the first), else 0.
if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[3]) then
	horizon(KEYS[1])
	return 2
end
local prefix = tonumber(ARGV[2])
if prefix > 0 and redis.call("getrange", KEYS[1], 0, prefix - 1) == string.sub(ARGV[1], 1, prefix) then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[3])
	horizon(KEYS[1])
	return 1
end
return 0
