-- Compare-and-pexpire: set the TTL only while token still holds the key,
-- and that of the holder's fencing token KEYS[2] with it, when given (with
-- fencing on; a lock taken before fencing has none).
if redis.call("get", KEYS[1]) == ARGV[1] then
	local done = redis.call("pexpire", KEYS[1], ARGV[2])
	if KEYS[2] then
		redis.call("pexpire", KEYS[2], ARGV[2])
	end
	return done
end
return 0
