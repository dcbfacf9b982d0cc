-- Compare-and-pexpire: set the TTL only while token still holds the key.
-- With fencing the lock's fencing token is in its value, and keeps it.
-- Replies the fencing token the lock carries (19 digits; "" without
-- fencing), which a top-up writes to a backend that lost the lock
-- (topup.go), when extended; 0 when not.
local value = redis.call("get", KEYS[1])
if holds(value, ARGV[1]) then
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	return fenceOf(value, ARGV[1])
end
return 0
