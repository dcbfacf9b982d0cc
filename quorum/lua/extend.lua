-- Compare-and-pexpire: set the TTL only while token still holds the key.
-- With fencing the lock's fencing token is in its value, and keeps it.
local value = redis.call("get", KEYS[1])
if holds(value, ARGV[1]) then
	return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0
