-- Set the TTL to ARGV[2] ms where ARGV[1] holds the key, take it where it
-- is free: 1 when renewed, 2 when taken (an undecided outcome undoes only
-- those), else 0.
local value = redis.call("get", KEYS[1])
if value == ARGV[1] then
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	return 1
end
if value == false then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2])
	horizon(KEYS[1])
	return 2
end
return 0
