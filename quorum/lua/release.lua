-- Compare-and-delete: remove the key only while token (ARGV[1]) still
-- holds it, and tell the engines waiting for it (waits.go) on its release
-- channel: ARGV[2], this release's id (the same on every backend), then
-- the token. A notice the backend refuses (an ACL user without the
-- channel: NOPERM) is left out, not the release: waiters then wake at
-- the holder's expiry. 1 deleted, 0 held by another value, -1 absent.
local value = redis.call("get", KEYS[1])
if holds(value, ARGV[1]) then
	redis.call("del", KEYS[1])
	redis.pcall("publish", "{lockproxy}:released:" .. KEYS[1], ARGV[2] .. ARGV[1])
	return 1
end
if value == false then
	return -1
end
return 0
