-- Compare-and-delete: remove the key only while token (ARGV[1]) still
-- holds it, and tell the engines waiting for it (lua/notice.lua): ARGV[2],
-- this release's id (the same on every backend), then the token. This runs
-- in every lock cycle, so it reads the key and its waiting marks in one
-- MGET, and publishes as notify would, written out. 1 deleted, 0 held by
-- another value, -1 absent.
local read = redis.call("mget", KEYS[1], "{lockproxy}:waiting:" .. KEYS[1], "{lockproxy}:listening")
local value = read[1]
if holds(value, ARGV[1]) then
	redis.call("del", KEYS[1])
	if read[2] or read[3] then
		redis.pcall("publish", "{lockproxy}:released:" .. KEYS[1], ARGV[2] .. ARGV[1])
	end
	return 1
end
if value == false then
	return -1
end
return 0
