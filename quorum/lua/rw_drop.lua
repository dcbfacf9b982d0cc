-- The end of a read or write hold that a quorum released (rwlock.go) on
-- a backend that still has the owner's field with the count ARGV[4] it
-- answered the release with: it had missed a re-entry. The field goes,
-- with its timeout keys, and the lock is tidied as the release tidies it;
-- other owners' holds stay. ARGV[1] the mode, ARGV[2] the owner, ARGV[3]
-- the timeout keys' prefix, ARGV[5] the release's id, ARGV[6] the latch's
-- TTL; the latch KEYS[2], when given, records what was done, as
-- rw_release.lua's does. A count that changed since is a later
-- acquisition's, and is left alone. 1 dropped, 0 not.
local key, latch, owner = KEYS[1], KEYS[2], ARGV[2]
local reader = ARGV[1] == "read"
local field = fieldOf(ARGV[1], owner)
if redis.pcall("hget", key, field) ~= ARGV[4] then
	return 0
end
redis.call("hdel", key, field)
local went
if reader then
	for i = tonumber(ARGV[4]), 1, -1 do
		redis.call("del", timeoutKey(ARGV[3], owner, i))
	end
	went = settleRead(key, ARGV[3], ARGV[5], field)
else
	went = settleWrite(key, ARGV[5], field)
end
if latch then
	redis.call("set", latch, went and "1" or "2", "px", ARGV[6])
end
return 1
