-- Compare-and-delete: remove the key only while token (ARGV[1]) still
-- holds it, and tell the engines waiting for it (lua/notice.lua): ARGV[2],
-- this release's id (the same on every backend), then the token. The key
-- and its waiting marks are read in one MGET: this runs in every lock
-- cycle, and a mark read apart would be one command more in each. 1
-- deleted, 0 held by another value, -1 absent.
local read = redis.call("mget", KEYS[1], "{lockproxy}:waiting:" .. KEYS[1], "{lockproxy}:listening")
local value = read[1]
if holds(value, ARGV[1]) then
	redis.call("del", KEYS[1])
	notify(KEYS[1], ARGV[2] .. ARGV[1], read[2] or read[3])
	return 1
end
if value == false then
	return -1
end
return 0
