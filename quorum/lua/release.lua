-- Compare-and-delete: remove the key only while token still holds it.
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0
