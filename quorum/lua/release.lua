-- Compare-and-delete: remove the key only while token still holds it, and
-- tell the engines waiting for it (waits.go) on its release channel.
-- 1 deleted, 0 held by another value, -1 absent.
local value = redis.call("get", KEYS[1])
if value == ARGV[1] then
	redis.call("del", KEYS[1])
	redis.call("publish", "{lockproxy}:released:" .. KEYS[1], ARGV[1])
	return 1
end
if value == false then
	return -1
end
return 0
