-- What the reads of a read-write lock (rw.lua) look at, on one backend:
-- ARGV[1] "mode" answers the lock's mode, nil where it has none (or is
-- not a hash); "read-locked" answers 1 where it is read-held (under
-- "read", or under "write" by the writer's own read hold too, as
-- Redisson's RReadLock.isLocked() says), else 0.
local kind = redis.call("type", KEYS[1])["ok"]
local mode = kind == "hash" and redis.call("hget", KEYS[1], "mode")
if ARGV[1] == "mode" then
	return mode
end
if mode == "read" then
	return 1
end
if mode == "write" then
	local n = 0
	for _ in pairs(holders(KEYS[1])) do
		n = n + 1
	end
	return n > 1 and 1 or 0
end
return 0
