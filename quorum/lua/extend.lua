-- Compare-and-pexpire: set the TTL only while token still holds the key.
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0
